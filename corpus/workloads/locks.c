/* cflags: */
/* locks - file locks and a lease held by a process tree (the state of CRIU's zdtm tests
 * file_locks00..06, file_lease00 and flock tests, set up by our own code). Files live in
 * /run/ovm/locks/.
 *
 *   root   a POSIX write lock on bytes 0-9 of posix, an OFD read lock on all of ofd,
 *          flock(LOCK_EX) on flock, and a read lease on lease (opened read-only)
 *   child  a POSIX read lock on bytes 100-199 of posix and flock(LOCK_SH) on shared, each
 *          through a file of its own; it waits in sigsuspend()
 *
 * Check (SIGUSR1): a probe process forked for the check sees every lock held by its owner:
 * F_GETLK reports the root's write lock on 0-9 and the child's read lock on 100-199 (with
 * their pids), F_OFD_GETLK a read lock on ofd, flock(LOCK_EX|LOCK_NB) fails with
 * EWOULDBLOCK on flock and on shared while flock(LOCK_SH|LOCK_NB) on shared succeeds; the
 * root's F_GETLEASE still says F_RDLCK.
 *
 * READY line:  READY pid=P child=C
 * CHECK line:  CHECK OK locks=6
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>

static const char *dir;

static int open_in_dir(const char *name, int flags)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return open(path, flags, 0644);
}

static int create_file(const char *name)
{
	int fd = open_in_dir(name, O_RDWR | O_CREAT | O_TRUNC);
	if (fd < 0)
		setup_fail("create %s", name);
	char block[256];
	memset(block, 'x', sizeof(block));
	if (write_full(fd, block, sizeof(block)) < 0)
		setup_fail("write %s", name);
	return fd;
}

static int posix_lock(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	return fcntl(fd, cmd, &fl);
}

/* Who holds a lock conflicting with a write lock on [start, start+len) of fd (F_GETLK or
 * F_OFD_GETLK): its type, and its pid through *pid. */
static int conflicting(int fd, int cmd, off_t start, off_t len, pid_t *pid)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	if (fcntl(fd, cmd, &fl) < 0)
		return -1;
	*pid = fl.l_pid;
	return fl.l_type;
}

/* In a fresh process: every lock must still exclude others. */
static void probe(pid_t root, pid_t child, int report)
{
	char err[1024] = "";
	pid_t pid;
	int posix = open_in_dir("posix", O_RDWR), ofd = open_in_dir("ofd", O_RDWR);
	int fl = open_in_dir("flock", O_RDWR), shared = open_in_dir("shared", O_RDWR);
	if (posix < 0 || ofd < 0 || fl < 0 || shared < 0)
		append(err, sizeof(err), "probe cannot open the files; ");
	int t = conflicting(posix, F_GETLK, 0, 10, &pid);
	if (t != F_WRLCK || pid != root)
		append(err, sizeof(err), "posix 0-9: type %d pid %d, want write by %d; ", t, (int)pid, (int)root);
	t = conflicting(posix, F_GETLK, 100, 100, &pid);
	if (t != F_RDLCK || pid != child)
		append(err, sizeof(err), "posix 100-199: type %d pid %d, want read by %d; ", t, (int)pid, (int)child);
	t = conflicting(posix, F_GETLK, 10, 90, &pid);
	if (t != F_UNLCK)
		append(err, sizeof(err), "posix 10-99 locked (type %d by %d); ", t, (int)pid);
	pid = 0;
	t = conflicting(ofd, F_OFD_GETLK, 0, 0, &pid);
	if (t != F_RDLCK)
		append(err, sizeof(err), "ofd: type %d, want read; ", t);
	if (flock(fl, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
		append(err, sizeof(err), "flock: not held exclusively; ");
	if (flock(shared, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
		append(err, sizeof(err), "shared: not held; ");
	if (flock(shared, LOCK_SH | LOCK_NB) < 0)
		append(err, sizeof(err), "shared: not a shared lock (errno %d); ", errno);
	send_report(report, err);
	_exit(0);
}

int main(void)
{
	setsid();
	dir = work_dir("locks");
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	int posix = create_file("posix");
	int ofd = create_file("ofd");
	int fl = create_file("flock");
	close(create_file("shared"));
	close(create_file("lease"));

	pid_t child = fork();
	if (child < 0)
		setup_fail("fork");
	if (child == 0) {
		int mine = open_in_dir("posix", O_RDWR), sh = open_in_dir("shared", O_RDWR);
		if (mine < 0 || posix_lock(mine, F_SETLK, F_RDLCK, 100, 100) < 0 || sh < 0 ||
		    flock(sh, LOCK_SH | LOCK_NB) < 0)
			setup_fail("child locks");
		for (;;)
			sigsuspend(&waitmask);
	}
	if (posix_lock(posix, F_SETLK, F_WRLCK, 0, 10) < 0)
		setup_fail("F_SETLK posix");
	if (posix_lock(ofd, F_OFD_SETLK, F_RDLCK, 0, 0) < 0)
		setup_fail("F_OFD_SETLK");
	if (flock(fl, LOCK_EX | LOCK_NB) < 0)
		setup_fail("flock");
	int lease = open_in_dir("lease", O_RDONLY);
	if (lease < 0 || fcntl(lease, F_SETLEASE, F_RDLCK) < 0)
		setup_fail("F_SETLEASE");
	/* the child's locks are in place before READY: wait for its probe to see the read lock */
	for (int i = 0;; i++) {
		pid_t who = 0;
		if (conflicting(posix, F_GETLK, 100, 100, &who) == F_RDLCK && who == child)
			break;
		if (i > 500)
			setup_fail("child never locked");
		sleep_ms(10);
	}

	say("READY pid=%d child=%d", (int)getpid(), (int)child);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		char err[1024] = "", verdict[REPORT_LEN + 1];
		int p[2];
		if (pipe(p) < 0) {
			say("CHECK FAIL pipe");
			continue;
		}
		pid_t prober = fork();
		if (prober == 0) {
			close(p[0]);
			probe(getppid(), child, p[1]);
		}
		close(p[1]);
		if (prober < 0 || recv_report(p[0], verdict) < 0)
			append(err, sizeof(err), "no verdict from the probe; ");
		else if (strcmp(verdict, "OK"))
			append(err, sizeof(err), "%s", verdict);
		close(p[0]);
		while (prober > 0 && waitpid(prober, NULL, 0) < 0 && errno == EINTR)
			;
		if (fcntl(lease, F_GETLEASE) != F_RDLCK)
			append(err, sizeof(err), "lease: F_GETLEASE says %d, want read; ", fcntl(lease, F_GETLEASE));
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK locks=6");
	}
}
