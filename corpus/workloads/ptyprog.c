/* cflags: */
/* ptyprog - a session leader with a pty as its controlling terminal.
 *
 * Opens /dev/ptmx + its slave, makes the slave the controlling tty
 * (TIOCSCTTY), puts distinctive raw-ish termios (no ECHO/ICANON/OPOST/ICRNL,
 * VMIN=1, VTIME=0, VINTR=^K) and a 33x101 winsize on it, opens /dev/tty (the
 * controlling terminal as a file: zdtm pty00), keeps the three fds open with empty queues and
 * sleeps in sigsuspend().
 * On SIGUSR1 it verifies session/foreground group, termios, winsize, that the /dev/tty fd is
 * still /dev/tty, and that data flows every way ("ping\n" master->slave, "pong" slave->master,
 * "tty!" /dev/tty->master, "back\n" master->/dev/tty).
 *
 * READY line:  READY master_fd=M slave_fd=S tty_fd=T pty=/dev/pts/N rows=33 cols=101
 * CHECK line:  CHECK OK pty=/dev/pts/N sid=P rows=33 cols=101 io=ok tty=ok
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>

#define ROWS 33
#define COLS 101
#define INTR_CHAR 0x0b	/* ^K instead of the default ^C */

static int master_fd, slave_fd, tty_fd;
static char slave_name[64];
static struct termios set_t;	/* termios as read back right after setup */

static void wanted_termios(struct termios *t)
{
	/* Raw byte transfer in both directions, so the I/O test is exact. */
	t->c_iflag &= ~(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON | IXOFF);
	t->c_oflag &= ~(OPOST | ONLCR | OCRNL);
	t->c_lflag &= ~(ECHO | ECHONL | ICANON | IEXTEN);
	t->c_lflag |= ISIG;
	t->c_cflag &= ~(CSIZE | PARENB);
	t->c_cflag |= CS8;
	t->c_cc[VMIN] = 1;
	t->c_cc[VTIME] = 0;
	t->c_cc[VINTR] = INTR_CHAR;
}

/* Read exactly len bytes from fd, waiting at most ~2 s in total. */
static int read_timed(int fd, char *buf, size_t len)
{
	size_t off = 0;
	for (int tries = 0; off < len && tries < 20; tries++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t r = read(fd, buf + off, len - off);
		if (r > 0)
			off += (size_t)r;
	}
	return off == len ? 0 : -1;
}

static void check(void)
{
	char err[1024] = "";

	pid_t sid = getsid(0);
	if (sid != getpid())
		append(err, sizeof(err), "not session leader (sid=%d); ", (int)sid);
	if (tcgetsid(slave_fd) != sid)
		append(err, sizeof(err), "tcgetsid=%d != sid=%d; ", (int)tcgetsid(slave_fd), (int)sid);
	if (tcgetpgrp(slave_fd) != getpgrp())
		append(err, sizeof(err), "foreground pgrp=%d; ", (int)tcgetpgrp(slave_fd));
	/* /dev/tty must resolve to our pty. */
	int tty = open("/dev/tty", O_RDWR | O_NOCTTY);
	if (tty < 0)
		append(err, sizeof(err), "no /dev/tty; ");
	else
		close(tty);
	char *name = ptsname(master_fd);
	if (!name || strcmp(name, slave_name) != 0)
		append(err, sizeof(err), "ptsname %s != %s; ", name ? name : "?", slave_name);

	struct termios got;
	if (tcgetattr(slave_fd, &got) < 0)
		append(err, sizeof(err), "tcgetattr; ");
	else if (got.c_iflag != set_t.c_iflag || got.c_oflag != set_t.c_oflag ||
		 got.c_lflag != set_t.c_lflag || got.c_cflag != set_t.c_cflag ||
		 got.c_line != set_t.c_line || memcmp(got.c_cc, set_t.c_cc, sizeof(got.c_cc)) ||
		 cfgetispeed(&got) != cfgetispeed(&set_t) || cfgetospeed(&got) != cfgetospeed(&set_t) ||
		 got.c_cc[VMIN] != 1 || got.c_cc[VTIME] != 0 || got.c_cc[VINTR] != INTR_CHAR)
		append(err, sizeof(err), "termios iflag=%o oflag=%o lflag=%o cflag=%o intr=%d; ",
		       got.c_iflag, got.c_oflag, got.c_lflag, got.c_cflag, got.c_cc[VINTR]);

	struct winsize ws;
	if (ioctl(slave_fd, TIOCGWINSZ, &ws) < 0 || ws.ws_row != ROWS || ws.ws_col != COLS)
		append(err, sizeof(err), "winsize %ux%u; ", ws.ws_row, ws.ws_col);

	/* Queues must be empty before the I/O test. */
	int q = -1;
	if (ioctl(slave_fd, FIONREAD, &q) < 0 || q != 0)
		append(err, sizeof(err), "slave input queue=%d; ", q);
	if (ioctl(master_fd, FIONREAD, &q) < 0 || q != 0)
		append(err, sizeof(err), "master input queue=%d; ", q);

	char buf[8] = "";
	if (write_full(master_fd, "ping\n", 5) < 0 || read_timed(slave_fd, buf, 5) < 0 ||
	    memcmp(buf, "ping\n", 5) != 0)
		append(err, sizeof(err), "master->slave failed; ");
	memset(buf, 0, sizeof(buf));
	if (write_full(slave_fd, "pong", 4) < 0 || read_timed(master_fd, buf, 4) < 0 ||
	    memcmp(buf, "pong", 4) != 0)
		append(err, sizeof(err), "slave->master failed; ");

	struct stat st;
	if (fstat(tty_fd, &st) < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != makedev(5, 0))
		append(err, sizeof(err), "fd %d is not /dev/tty; ", tty_fd);
	memset(buf, 0, sizeof(buf));
	if (write_full(tty_fd, "tty!", 4) < 0 || read_timed(master_fd, buf, 4) < 0 || memcmp(buf, "tty!", 4) != 0)
		append(err, sizeof(err), "/dev/tty->master failed; ");
	memset(buf, 0, sizeof(buf));
	if (write_full(master_fd, "back\n", 5) < 0 || read_timed(tty_fd, buf, 5) < 0 || memcmp(buf, "back\n", 5) != 0)
		append(err, sizeof(err), "master->/dev/tty failed; ");

	if (err[0])
		say("CHECK FAIL %s", err);
	else
		say("CHECK OK pty=%s sid=%d rows=%d cols=%d io=ok tty=ok", slave_name, (int)sid, ROWS, COLS);
}

int main(void)
{
	setsid();

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	/* Being a tty session leader: ignore job-control noise from the tty. */
	signal(SIGTTOU, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);

	master_fd = posix_openpt(O_RDWR | O_NOCTTY);
	if (master_fd < 0 || grantpt(master_fd) < 0 || unlockpt(master_fd) < 0)
		setup_fail("ptmx");
	char *name = ptsname(master_fd);
	if (!name)
		setup_fail("ptsname");
	snprintf(slave_name, sizeof(slave_name), "%s", name);
	slave_fd = open(slave_name, O_RDWR | O_NOCTTY);
	if (slave_fd < 0)
		setup_fail("open %s", slave_name);
	if (ioctl(slave_fd, TIOCSCTTY, 0) < 0)
		setup_fail("TIOCSCTTY");

	struct termios t;
	if (tcgetattr(slave_fd, &t) < 0)
		setup_fail("tcgetattr");
	wanted_termios(&t);
	if (tcsetattr(slave_fd, TCSANOW, &t) < 0 || tcgetattr(slave_fd, &set_t) < 0)
		setup_fail("tcsetattr");
	if ((set_t.c_lflag & (ECHO | ICANON)) || (set_t.c_oflag & OPOST) ||
	    set_t.c_cc[VINTR] != INTR_CHAR)
		setup_fail("termios did not stick");
	struct winsize ws = { .ws_row = ROWS, .ws_col = COLS };
	if (ioctl(slave_fd, TIOCSWINSZ, &ws) < 0)
		setup_fail("TIOCSWINSZ");

	if (tcgetsid(slave_fd) != getsid(0))
		setup_fail("pty is not our controlling terminal");
	tty_fd = open("/dev/tty", O_RDWR);
	if (tty_fd < 0)
		setup_fail("open /dev/tty");

	say("READY master_fd=%d slave_fd=%d tty_fd=%d pty=%s rows=%d cols=%d",
	    master_fd, slave_fd, tty_fd, slave_name, ROWS, COLS);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		check();
	}
}
