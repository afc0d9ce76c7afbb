/* cflags: */
/* nsfiles - namespace files held open (the state of CRIU's zdtm test proc-self, set up by our
 * own code): fds on /proc/self/ns/net, uts, ipc and mnt, one of them opened O_CLOEXEC.
 *
 * Check (SIGUSR1): each fd is still a namespace file (fstat on nsfs) of the namespace the process
 * is in now, the one /proc/self/ns/KIND names (same inode number), and setns() to it succeeds
 * (a namespace file, not a regular file that happens to have that name).
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK nsfiles=4
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sched.h>

#define NSFS_MAGIC 0x6e736673
#include <sys/vfs.h>

static const char *const kinds[] = { "net", "uts", "ipc", "mnt" };
static const int types[] = { CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNS };
#define NKINDS 4
static int fds[NKINDS];

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	for (int i = 0; i < NKINDS; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/ns/%s", kinds[i]);
		fds[i] = open(path, O_RDONLY | (i == 1 ? O_CLOEXEC : 0));
		if (fds[i] < 0)
			setup_fail("open %s", path);
	}
	say("READY pid=%d", (int)getpid());

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		char err[1024] = "";
		for (int i = 0; i < NKINDS; i++) {
			char path[64];
			struct stat held, now;
			struct statfs fs;
			snprintf(path, sizeof(path), "/proc/self/ns/%s", kinds[i]);
			if (fstat(fds[i], &held) < 0 || stat(path, &now) < 0 || fstatfs(fds[i], &fs) < 0) {
				append(err, sizeof(err), "%s: stat (errno %d); ", kinds[i], errno);
				continue;
			}
			if ((unsigned long)fs.f_type != NSFS_MAGIC || held.st_ino != now.st_ino)
				append(err, sizeof(err), "%s: fd on fs 0x%lx inode %lu, now in %lu; ", kinds[i],
				       (unsigned long)fs.f_type, (unsigned long)held.st_ino, (unsigned long)now.st_ino);
			else if (setns(fds[i], types[i]) < 0)
				append(err, sizeof(err), "%s: setns (errno %d); ", kinds[i], errno);
		}
		int cloexec = fcntl(fds[1], F_GETFD);
		if (cloexec != FD_CLOEXEC || fcntl(fds[0], F_GETFD) != 0)
			append(err, sizeof(err), "close-on-exec flags lost; ");
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK nsfiles=%d", NKINDS);
	}
}
