/* cflags: */
/* scmrights - files in flight: sent over a UNIX socket with SCM_RIGHTS and closed by the sender,
 * so that only the messages hold them (the state of CRIU's zdtm test scm00, set up by our own
 * code). The pipe's read end and the file below are sent and then closed: no fd holds them.
 *
 * Default mode, on a socketpair(AF_UNIX, SOCK_DGRAM), fd 3 sends to fd 4:
 *
 *   first    "A", with the read end of a pipe (its write end stays at fd 6) and a file opened
 *            read-write on /run/ovm/scmrights/data at offset 3
 *   second   "B", with no files
 *
 * Mode "stream", on a socketpair(AF_UNIX, SOCK_STREAM), fd 3 writes to fd 4 four messages, whose
 * files must come with the bytes they were sent with:
 *
 *   "hd"     no files, queued before the files (criu's peek glues these into the next read)
 *   "xyz"    the pipe's read end and the data file (opened read-only at offset 3)
 *   "w"      no files
 *   "k"      the pipe's read end again
 *
 * Check (SIGUSR1): fd 4 receives each message with exactly its files, in reads of its length
 * with room for four files; "HELLO" written to fd 6 is read from the received pipe end (in
 * stream mode "AGAIN" from the second copy too); the received file is at offset 3, open with
 * its access mode, and reads the data file's bytes from there. Then the messages are sent
 * again and the received files closed, so a later check finds the same state.
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK rights=2 pipe=ok file=ok
 *              CHECK OK stream rights=2+1 pipe=ok file=ok       (stream mode)
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/socket.h>

#define DATA "0123456789"
#define OFFSET 3

struct message {
	const char *bytes;
	int files; /* 0: none, 1: the pipe's read end, 2: it and the data file */
};

static const struct message DGRAM[] = { { "A", 2 }, { "B", 0 } };
static const struct message STREAM[] = { { "hd", 0 }, { "xyz", 2 }, { "w", 0 }, { "k", 1 } };

static const struct message *messages = DGRAM;
static size_t n_messages = 2;
static int file_mode = O_RDWR;
static int sk[2], pipe_w;

static int send_with(int via, const char *bytes, const int *fds, int n)
{
	char control[CMSG_SPACE(2 * sizeof(int))];
	struct iovec iov = { .iov_base = (void *)bytes, .iov_len = strlen(bytes) };
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
	return sendmsg(via, &h, 0) == (ssize_t)strlen(bytes) ? 0 : -1;
}

/* one read of `len` bytes into `buf`, with room for four files: the files it brought (their
 * count, -1 for a short read, a truncation or more than two files) */
static int recv_with(int via, char *buf, size_t len, int *fds)
{
	char control[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control) };
	if (recvmsg(via, &h, MSG_DONTWAIT) != (ssize_t)len || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
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

static void send_all(int pipe_r, int file)
{
	int fds[2] = { pipe_r, file };
	for (size_t i = 0; i < n_messages; i++)
		if (send_with(sk[0], messages[i].bytes, fds, messages[i].files) < 0)
			setup_fail("sendmsg %s", messages[i].bytes);
	close(pipe_r);
	close(file);
}

static void check_pipe_end(int fd, const char *word, char *err, size_t errsz)
{
	char buf[16] = "";
	if (write_full(pipe_w, word, strlen(word)) < 0 || read(fd, buf, sizeof(buf)) != (ssize_t)strlen(word) ||
	    memcmp(buf, word, strlen(word)))
		append(err, errsz, "a pipe end received does not read %s, which fd 6 wrote; ", word);
}

static void check(char *err, size_t errsz)
{
	int pipe_r = -1, file = -1;
	for (size_t i = 0; i < n_messages; i++) {
		char buf[8] = "";
		int fds[2] = { -1, -1 };
		const struct message *m = &messages[i];
		int n = recv_with(sk[1], buf, strlen(m->bytes), fds);
		if (n != m->files || strcmp(buf, m->bytes)) {
			append(err, errsz, "message %zu: read \"%s\" with %d files, not \"%s\" with %d; ", i + 1, buf, n,
			       m->bytes, m->files);
			return;
		}
		if (n == 2) {
			pipe_r = fds[0];
			file = fds[1];
		} else if (n == 1) {
			check_pipe_end(fds[0], "AGAIN", err, errsz);
			close(fds[0]);
		}
	}
	char rest;
	if (recv(sk[1], &rest, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN)
		append(err, errsz, "more is queued than was sent; ");
	check_pipe_end(pipe_r, "HELLO", err, errsz);
	int flags = fcntl(file, F_GETFL);
	if (flags < 0 || (flags & O_ACCMODE) != file_mode || lseek(file, 0, SEEK_CUR) != OFFSET)
		append(err, errsz, "the file received: flags 0%o offset %ld; ", flags, (long)lseek(file, 0, SEEK_CUR));
	char buf[16] = "";
	if (read(file, buf, sizeof(buf)) != (ssize_t)strlen(DATA) - OFFSET || strcmp(buf, DATA + OFFSET))
		append(err, errsz, "the file received reads %s; ", buf);
	if (lseek(file, OFFSET, SEEK_SET) != OFFSET)
		append(err, errsz, "cannot put the file's offset back; ");
	send_all(pipe_r, file);
}

int main(int argc, char **argv)
{
	setsid();
	int type = SOCK_DGRAM;
	const char *ok = "CHECK OK rights=2 pipe=ok file=ok";
	if (argc > 1 && !strcmp(argv[1], "stream")) {
		type = SOCK_STREAM;
		messages = STREAM;
		n_messages = sizeof(STREAM) / sizeof(STREAM[0]);
		file_mode = O_RDONLY;
		ok = "CHECK OK stream rights=2+1 pipe=ok file=ok";
	} else if (argc > 1) {
		setup_fail("unknown mode %s", argv[1]);
	}
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	const char *dir = work_dir("scmrights");
	int p[2];
	if (socketpair(AF_UNIX, type, 0, sk) < 0 || sk[0] != 3 || sk[1] != 4)
		setup_fail("socketpair");
	if (pipe(p) < 0 || p[0] != 5 || p[1] != 6)
		setup_fail("pipe");
	pipe_w = 6;
	char path[4200];
	snprintf(path, sizeof(path), "%s/data", dir);
	int file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (file < 0 || write_full(file, DATA, strlen(DATA)) < 0)
		setup_fail("%s", path);
	if (file_mode != O_RDWR) {
		close(file);
		file = open(path, file_mode);
	}
	if (file < 0 || lseek(file, OFFSET, SEEK_SET) != OFFSET)
		setup_fail("%s", path);
	send_all(p[0], file);
	say("READY pid=%d", (int)getpid());

	serve_checks(&blocked, &waitmask, check, ok);
}
