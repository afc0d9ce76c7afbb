/* cflags: */
/* ptydata - what a pseudo-terminal's readers have not read (the state of CRIU's zdtm test pty02,
 * set up by our own code). A pty pair, not the controlling terminal: master fd 3, slave fd 4.
 * The slave is canonical with signals and no echo; its output goes through OPOST and ONLCR.
 *
 *   master -> slave   "ping\nline two\n" written and not read: two lines for the slave's reader
 *   slave -> master   "pong" written and not read: four bytes for the master's reader
 *
 * Check (SIGUSR1): FIONREAD is 14 on the slave and 4 on the master; the slave's reader gets
 * "ping\n", then "line two\n"; the master's gets "pong"; then nothing more on either end (no
 * echo came back, no byte was doubled). Then both are written again, so a later check finds the
 * same state.
 *
 * READY line:  READY pid=P master_fd=3 slave_fd=4
 * CHECK line:  CHECK OK slave=ping,line-two master=pong
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>

#define TO_SLAVE "ping\nline two\n"
#define TO_MASTER "pong"

static int master_fd, slave_fd;

/* One read() of at most len bytes, waiting at most 2 s for the first; -1 if none came. */
static ssize_t read_once(int fd, char *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, 2000) != 1)
		return -1;
	return read(fd, buf, len);
}

static int queued(int fd)
{
	int q = -1;
	return ioctl(fd, FIONREAD, &q) < 0 ? -1 : q;
}

static void fill(void)
{
	if (write_full(master_fd, TO_SLAVE, strlen(TO_SLAVE)) < 0 || write_full(slave_fd, TO_MASTER, strlen(TO_MASTER)) < 0)
		setup_fail("write the queues");
}

static void check(char *err, size_t errsz)
{
	char buf[64];
	if (queued(slave_fd) != (int)strlen(TO_SLAVE))
		append(err, errsz, "slave queue %d bytes; ", queued(slave_fd));
	if (queued(master_fd) != (int)strlen(TO_MASTER))
		append(err, errsz, "master queue %d bytes; ", queued(master_fd));
	static const char *const lines[] = { "ping\n", "line two\n" };
	for (int i = 0; i < 2; i++) {
		memset(buf, 0, sizeof(buf));
		ssize_t n = read_once(slave_fd, buf, sizeof(buf) - 1);
		if (n != (ssize_t)strlen(lines[i]) || strcmp(buf, lines[i]))
			append(err, errsz, "slave read %d: %zd bytes \"%s\"; ", i, n, buf);
	}
	memset(buf, 0, sizeof(buf));
	ssize_t n = read_once(master_fd, buf, sizeof(buf) - 1);
	if (n != (ssize_t)strlen(TO_MASTER) || strcmp(buf, TO_MASTER))
		append(err, errsz, "master read: %zd bytes \"%s\"; ", n, buf);
	if (queued(slave_fd) != 0 || queued(master_fd) != 0)
		append(err, errsz, "left after the reads: slave %d, master %d; ", queued(slave_fd), queued(master_fd));
	fill();
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	master_fd = posix_openpt(O_RDWR | O_NOCTTY);
	if (master_fd != 3 || grantpt(master_fd) < 0 || unlockpt(master_fd) < 0)
		setup_fail("posix_openpt");
	char *name = ptsname(master_fd);
	slave_fd = name ? open(name, O_RDWR | O_NOCTTY) : -1;
	if (slave_fd != 4)
		setup_fail("open the slave");
	struct termios t;
	if (tcgetattr(slave_fd, &t) < 0)
		setup_fail("tcgetattr");
	t.c_lflag |= ICANON | ISIG | IEXTEN;
	t.c_lflag &= ~(ECHO | ECHONL);
	t.c_oflag |= OPOST | ONLCR;
	if (tcsetattr(slave_fd, TCSANOW, &t) < 0)
		setup_fail("tcsetattr");
	fill();
	say("READY pid=%d master_fd=%d slave_fd=%d", (int)getpid(), master_fd, slave_fd);

	serve_checks(&blocked, &waitmask, check, "CHECK OK slave=ping,line-two master=pong");
}
