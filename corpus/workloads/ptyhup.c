/* cflags: */
/* ptyhup - a pty slave whose master is closed (the state of CRIU's zdtm test pty04, set up by
 * our own code). The process, a session leader, opens a pty and its slave twice (fds 4 and 5),
 * makes the slave its controlling terminal, and closes the master (fd 3): the kernel hangs the
 * slave up, and the session loses its controlling terminal.
 *
 * Check (SIGUSR1), on each slave fd: it is still the character device it was (same rdev); read()
 * returns 0 (end of file), write() fails with EIO, TIOCGSID fails with EIO; and the process has
 * no controlling terminal (open("/dev/tty") fails with ENXIO).
 *
 * READY line:  READY pid=P slave_fds=4,5 pty=/dev/pts/N
 * CHECK line:  CHECK OK hung=2
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

static const int slaves[] = { 4, 5 };
static dev_t slave_rdev;

static void check(char *err, size_t errsz)
{
	for (int i = 0; i < 2; i++) {
		int fd = slaves[i];
		struct stat st;
		char c;
		pid_t sid;
		if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != slave_rdev)
			append(err, errsz, "fd %d is not the slave it was; ", fd);
		ssize_t n = read(fd, &c, 1);
		if (n != 0)
			append(err, errsz, "fd %d: read gave %zd (errno %d), not end of file; ", fd, n, errno);
		errno = 0;
		if (write(fd, "x", 1) != -1 || errno != EIO)
			append(err, errsz, "fd %d: write did not fail with EIO (errno %d); ", fd, errno);
		errno = 0;
		if (ioctl(fd, TIOCGSID, &sid) != -1 || errno != EIO)
			append(err, errsz, "fd %d: TIOCGSID did not fail with EIO (errno %d); ", fd, errno);
	}
	errno = 0;
	int tty = open("/dev/tty", O_RDWR);
	if (tty >= 0 || errno != ENXIO) {
		append(err, errsz, "/dev/tty opened or failed otherwise (errno %d); ", errno);
		if (tty >= 0)
			close(tty);
	}
}

int main(void)
{
	setsid();
	signal(SIGHUP, SIG_IGN); /* the hangup's signal to the session leader */
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	if (master != 3 || grantpt(master) < 0 || unlockpt(master) < 0)
		setup_fail("posix_openpt");
	char name[64];
	if (ptsname_r(master, name, sizeof(name)) != 0)
		setup_fail("ptsname");
	for (int i = 0; i < 2; i++)
		if (open(name, O_RDWR | O_NOCTTY) != slaves[i])
			setup_fail("open %s", name);
	if (ioctl(slaves[0], TIOCSCTTY, 0) < 0)
		setup_fail("TIOCSCTTY");
	struct stat st;
	if (fstat(slaves[0], &st) < 0)
		setup_fail("fstat");
	slave_rdev = st.st_rdev;
	close(master);
	say("READY pid=%d slave_fds=4,5 pty=%s", (int)getpid(), name);
	serve_checks(&blocked, &waitmask, check, "CHECK OK hung=2");
}
