/* cflags: */
/* scmrights - files in flight: sent over a UNIX datagram socket with SCM_RIGHTS and closed by the
 * sender, so that only the message holds them (the state of CRIU's zdtm test scm00, set up by
 * our own code). On a socketpair(AF_UNIX, SOCK_DGRAM), fd 3 sends to fd 4:
 *
 *   first    "A", with the read end of a pipe (its write end stays at fd 6) and a file opened
 *            read-write on /run/ovm/scmrights/data at offset 3
 *   second   "B", with no files
 *
 * The sent pipe end and file are closed after the send: no fd of the process holds them.
 *
 * Check (SIGUSR1): fd 4 receives "A" with exactly two files, then "B" with none; "HELLO"
 * written to fd 6 is read from the received pipe end; the received file is at offset 3, open
 * read-write, and reads the data file's bytes from there. Then both messages are sent again
 * and the received files closed, so a later check finds the same state.
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK rights=2 pipe=ok file=ok
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/socket.h>

#define DATA "0123456789"
#define OFFSET 3

static int sk[2], pipe_w;

static int send_with(int via, char byte, const int *fds, int n)
{
	char control[CMSG_SPACE(2 * sizeof(int))];
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n) {
		memset(control, 0, sizeof(control));
		h.msg_control = control;
		h.msg_controllen = CMSG_SPACE(n * sizeof(int));
		struct cmsghdr *ch = CMSG_FIRSTHDR(&h);
		ch->cmsg_level = SOL_SOCKET;
		ch->cmsg_type = SCM_RIGHTS;
		ch->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(ch), fds, n * sizeof(int));
	}
	return sendmsg(via, &h, 0) == 1 ? 0 : -1;
}

/* one message: its byte, and up to two files (their count, -1 when truncated) */
static int recv_with(int via, char *byte, int *fds)
{
	char control[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { .iov_base = byte, .iov_len = 1 };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control) };
	if (recvmsg(via, &h, MSG_DONTWAIT) != 1 || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return -1;
	struct cmsghdr *ch = CMSG_FIRSTHDR(&h);
	if (!ch)
		return 0;
	if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS)
		return -1;
	int n = (int)((ch->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	if (n > 2)
		return -1;
	memcpy(fds, CMSG_DATA(ch), n * sizeof(int));
	return n;
}

static void send_both(int pipe_r, int file)
{
	int fds[2] = { pipe_r, file };
	if (send_with(sk[0], 'A', fds, 2) < 0 || send_with(sk[0], 'B', NULL, 0) < 0)
		setup_fail("sendmsg");
	close(pipe_r);
	close(file);
}

static void check(char *err, size_t errsz)
{
	char byte = 0;
	int fds[2] = { -1, -1 };
	int n = recv_with(sk[1], &byte, fds);
	if (n != 2 || byte != 'A') {
		append(err, errsz, "first message: byte %d with %d files; ", byte, n);
		return;
	}
	int none[2];
	n = recv_with(sk[1], &byte, none);
	if (n != 0 || byte != 'B')
		append(err, errsz, "second message: byte %d with %d files; ", byte, n);
	char buf[16] = "";
	if (write_full(pipe_w, "HELLO", 5) < 0 || read(fds[0], buf, sizeof(buf)) != 5 || memcmp(buf, "HELLO", 5))
		append(err, errsz, "the pipe end received does not read what fd 6 wrote; ");
	int flags = fcntl(fds[1], F_GETFL);
	if (flags < 0 || (flags & O_ACCMODE) != O_RDWR || lseek(fds[1], 0, SEEK_CUR) != OFFSET)
		append(err, errsz, "the file received: flags 0%o offset %ld; ", flags, (long)lseek(fds[1], 0, SEEK_CUR));
	memset(buf, 0, sizeof(buf));
	if (read(fds[1], buf, sizeof(buf)) != (ssize_t)strlen(DATA) - OFFSET || strcmp(buf, DATA + OFFSET))
		append(err, errsz, "the file received reads %s; ", buf);
	if (lseek(fds[1], OFFSET, SEEK_SET) != OFFSET)
		append(err, errsz, "cannot put the file's offset back; ");
	send_both(fds[0], fds[1]);
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	const char *dir = work_dir("scmrights");
	int p[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sk) < 0 || sk[0] != 3 || sk[1] != 4)
		setup_fail("socketpair");
	if (pipe(p) < 0 || p[0] != 5 || p[1] != 6)
		setup_fail("pipe");
	pipe_w = 6;
	char path[4200];
	snprintf(path, sizeof(path), "%s/data", dir);
	int file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (file < 0 || write_full(file, DATA, strlen(DATA)) < 0 || lseek(file, OFFSET, SEEK_SET) != OFFSET)
		setup_fail("%s", path);
	send_both(p[0], file);
	say("READY pid=%d", (int)getpid());

	serve_checks(&blocked, &waitmask, check, "CHECK OK rights=2 pipe=ok file=ok");
}
