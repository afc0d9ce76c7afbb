/* cflags: */
/* hazards - one child per piece of state that CRIU's zdtm tests check and that a dump must
 * either save or refuse by name (never write as something else). Each child sets up its
 * piece, then waits in sigsuspend(); the root waits too.
 *
 *   nsfd      an fd on /proc/self/ns/net                             (zdtm proc-self)
 *   ptyqueue  both ends of a pty, 7 bytes written to the master and not read, the terminal
 *             echoing (zdtm pty02 as zdtm sets it up: criu's restore would echo them again)
 *   inotifyq  an inotify instance with one event not read (criu's dump drops it)
 *   oneshot   an inotify instance whose watch has IN_ONESHOT (criu's restore drops the flag)
 *   shadowed  an inotify watch on a directory that a tmpfs mounted over its parent then hides:
 *             its name reaches the new mount (criu's dump finds no path that opens the inode)
 *
 * Files live in /run/ovm/hazards/. No golden images: this tree is for a dump's refusals.
 *
 * READY line:  READY root=R nsfd=P ptyqueue=P inotifyq=P oneshot=P shadowed=P
 * CHECK line:  CHECK OK children=5 (every child still alive)
 *
 * File locks and leases are the locks workload's (saved with --file-locks), a shared anonymous
 * mapping's file the memfd workload's, a pty slave whose master closed (zdtm pty04) the
 * ptyhup workload's, unlinked files, removed cwds and a cwd in an exited
 * process's /proc directory (zdtm unhashed_proc) the ghosts workload's.
 */
#include "common.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/mount.h>

static void nsfd(void)
{
	if (open("/proc/self/ns/net", O_RDONLY) < 0)
		setup_fail("open /proc/self/ns/net");
}

static int open_pty(int *slave)
{
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0)
		setup_fail("posix_openpt");
	char *name = ptsname(master);
	if (!name)
		setup_fail("ptsname");
	*slave = open(name, O_RDWR | O_NOCTTY);
	if (*slave < 0)
		setup_fail("open %s", name);
	return master;
}

static void ptyqueue(void)
{
	int slave;
	int master = open_pty(&slave);
	if (write(master, "queued\n", 7) != 7)
		setup_fail("write to pty master");
}

static void inotify_on(const char *name, uint32_t mask)
{
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/hazards/%s", run_dir(), name) >= (int)sizeof(path))
		setup_fail("path of %s too long", name);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		setup_fail("mkdir %s", path);
	int fd = inotify_init1(IN_NONBLOCK);
	if (fd < 0 || inotify_add_watch(fd, path, mask) != 1)
		setup_fail("inotify watch on %s", path);
	char made[4200];
	snprintf(made, sizeof(made), "%s/made", path);
	if (mkdir(made, 0755) < 0)  /* one IN_CREATE event, queued where the mask has it */
		setup_fail("mkdir %s", made);
}

static void inotifyq(void)
{
	inotify_on("inotifyq", IN_CREATE);
}

static void oneshot(void)
{
	inotify_on("oneshot", IN_DELETE | IN_ONESHOT);
}

static void shadowed(void)
{
	char dir[4096], watched[4200];
	if (snprintf(dir, sizeof(dir), "%s/hazards/shadowed", run_dir()) >= (int)sizeof(dir))
		setup_fail("path of shadowed too long");
	snprintf(watched, sizeof(watched), "%s/dir", dir);
	if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || (mkdir(watched, 0755) < 0 && errno != EEXIST))
		setup_fail("mkdir %s", watched);
	int fd = inotify_init1(IN_NONBLOCK);
	if (fd < 0 || inotify_add_watch(fd, watched, IN_CREATE) != 1)
		setup_fail("inotify watch on %s", watched);
	if (mount("none", dir, "tmpfs", 0, "size=64k") < 0)
		setup_fail("mount a tmpfs on %s", dir);
}

static const struct {
	const char *name;
	void (*setup)(void);
} hazards[] = {
	{ "nsfd", nsfd },
	{ "ptyqueue", ptyqueue },
	{ "inotifyq", inotifyq },
	{ "oneshot", oneshot },
	{ "shadowed", shadowed },
};
#define NHAZARDS ((int)(sizeof(hazards) / sizeof(hazards[0])))

int main(void)
{
	setsid();
	work_dir("hazards");
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	pid_t pids[NHAZARDS];
	int ready[2];
	if (pipe(ready) < 0)
		setup_fail("pipe");
	for (int i = 0; i < NHAZARDS; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			setup_fail("fork %s", hazards[i].name);
		if (pids[i] == 0) {
			close(ready[0]);
			hazards[i].setup();
			char ok = 1;
			if (write(ready[1], &ok, 1) != 1)
				_exit(1);
			close(ready[1]);
			for (;;)
				sigsuspend(&waitmask);
		}
	}
	close(ready[1]);
	for (int i = 0; i < NHAZARDS; i++) {
		char ok;
		if (read_full(ready[0], &ok, 1) < 0)
			setup_fail("a hazard child failed its set-up (see its SETUP FAIL line)");
	}
	close(ready[0]);

	char line[1024] = "READY root=";
	append(line, sizeof(line), "%d", (int)getpid());
	for (int i = 0; i < NHAZARDS; i++)
		append(line, sizeof(line), " %s=%d", hazards[i].name, (int)pids[i]);
	say("%s", line);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		int alive = 0;
		for (int i = 0; i < NHAZARDS; i++)
			alive += kill(pids[i], 0) == 0;
		if (alive == NHAZARDS)
			say("CHECK OK children=%d", alive);
		else
			say("CHECK FAIL only %d of %d children alive", alive, NHAZARDS);
	}
}
