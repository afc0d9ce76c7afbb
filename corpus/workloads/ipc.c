/* cflags: */
/* ipc - two processes joined by a FIFO and UNIX domain sockets, with data queued in each.
 *
 * Root R (session leader) and its child K share (dir = $OVM_RUN_DIR/ipc):
 *   fifo     dir/fifo: R holds the read end, K the write end; K queued FIFO_MSG.
 *   spair    socketpair(AF_UNIX, SOCK_STREAM): bytes queued both ways.
 *   dpair    socketpair(AF_UNIX, SOCK_DGRAM): K sent three datagrams R has not read.
 *   listener dir/stream.sock: R listens; K's client is connected to R's accepted socket,
 *            bytes queued both ways; K's include a BIG_LEN-byte write, which the kernel keeps
 *            partly in page fragments of the skb. K's second client ("pending") connected
 *            too, and R has not accepted it (zdtm sockets00): R's first check accepts it and
 *            sends LATE_MSG, which K reads; their probes cross it as on the other channels.
 *   dgram    dir/dgram.sock: R's bound datagram socket; K's unbound socket, connected to
 *            it, sent two datagrams.
 *   qpair    socketpair(AF_UNIX, SOCK_SEQPACKET): K sent two records R has not read.
 *   abstract R's datagram socket bound to the abstract name "\0ovm-ipc-abstract"; K sent it
 *            a datagram with sendto() from an unbound, unconnected socket.
 *   ctl      a pipe R -> K: K blocks in read() on it until R's check wakes it.
 * Nothing queued is read before the check, so it is all in the kernel at checkpoint time.
 *
 * Check (SIGUSR1 to R): R reads everything queued for it, exact bytes and datagram
 * boundaries (the first check only), then writes one byte to ctl. K verifies what was
 * queued for it, writes a probe on every channel it holds and a report over spair;
 * R reads the probes and the report.
 *
 * READY line:  READY root=R child=K
 * CHECK line:  CHECK OK root=R child=K channels=9
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

static const char FIFO_MSG[] = "fifo: queued by the child before the checkpoint";
static const char SPAIR_TO_R[] = "spair: stream bytes the child wrote for the root";
static const char SPAIR_TO_K[] = "spair: stream bytes the root wrote for the child, twice as long as needed";
static const char *const DGRAMS_TO_R[] = { "dpair-1", "dpair-2: a longer datagram", "dpair-3:x" };
static const char ACCEPTED_TO_R[] = "listener: the client's bytes, waiting in the accepted socket";
static const char CLIENT_TO_K[] = "listener: the accepted socket's bytes, waiting in the client";
static const char *const NAMED_DGRAMS[] = { "named-dgram-one", "named-dgram-two!" };
static const char *const RECORDS[] = { "seqpacket-1", "seqpacket-two" };
static const char ABSTRACT_MSG[] = "abstract-hello";
static const char ABSTRACT_NAME[] = "\0ovm-ipc-abstract";
static const char LATE_MSG[] = "listener: accepted only after the restore";
static const char PROBE[] = "probe";
#define BIG_LEN 12000
static char big[BIG_LEN], accepted_to_r[sizeof(ACCEPTED_TO_R) - 1 + BIG_LEN];

/* The bytes K's client writes in one write(): a pattern that shows any lost or moved byte. */
static void make_big(void)
{
	for (int i = 0; i < BIG_LEN; i++)
		big[i] = (char)('a' + (i * 7 + i / 26) % 26);
	memcpy(accepted_to_r, ACCEPTED_TO_R, sizeof(ACCEPTED_TO_R) - 1);
	memcpy(accepted_to_r + sizeof(ACCEPTED_TO_R) - 1, big, BIG_LEN);
}

static socklen_t abstract_addr(struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	memcpy(a->sun_path, ABSTRACT_NAME, sizeof(ABSTRACT_NAME) - 1);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + sizeof(ABSTRACT_NAME) - 1);
}

static char fifo_path[108], stream_path[108], dgram_path[108];

static void addr_of(struct sockaddr_un *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	memcpy(a->sun_path, path, strlen(path) + 1);	/* paths are checked to fit */
}

/* A non-blocking read of a FIFO or a socket (recv() refuses FIFOs). */
static ssize_t recv_any(int fd, char *buf, size_t len)
{
	int fl = fcntl(fd, F_GETFL);
	if (!(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	ssize_t r = read(fd, buf, len);
	int e = errno;
	if (!(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl);
	errno = e;
	return r;
}

/* Read exactly `want` from a non-blocking stream fd, waiting up to 2 s for it to arrive. */
static int expect_stream(int fd, const char *want, size_t len, const char *what, char *err, size_t errsz)
{
	static char buf[sizeof(accepted_to_r)];
	size_t got = 0;
	if (len > sizeof(buf))
		len = sizeof(buf);
	for (int tries = 0; got < len && tries < 200; tries++) {
		ssize_t r = recv_any(fd, buf + got, len - got);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			break;
		sleep_ms(10);
	}
	if (got != len || memcmp(buf, want, len)) {
		append(err, errsz, "%s: got %zu of %zu bytes%s; ", what, got, len,
		       got == len ? " (different)" : "");
		return -1;
	}
	return 0;
}

/* Receive one datagram of exactly `want` (boundaries kept), waiting up to 2 s. */
static int expect_dgram(int fd, const char *want, const char *what, char *err, size_t errsz)
{
	char buf[512];
	ssize_t r = -1;
	for (int tries = 0; tries < 200; tries++) {
		r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r >= 0 || (errno != EAGAIN && errno != EINTR))
			break;
		sleep_ms(10);
	}
	size_t len = strlen(want);
	if (r != (ssize_t)len || memcmp(buf, want, len)) {
		append(err, errsz, "%s: datagram of %zd bytes, wanted %zu '%s'; ", what, r, len, want);
		return -1;
	}
	return 0;
}

static int send_all(int fd, const char *s, size_t len)
{
	return write_full(fd, s, len);
}

/* K's second client: connected after the first, so that R's accept() takes the first. */
static int pending_connect(int fd, const struct sockaddr_un *sa)
{
	sleep_ms_full(100);
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
		_exit(7);
	return fd;
}

/* K: queue its data, then wait on ctl; on each byte verify (first time) and probe. */
static void child(int ctl, int fifo_w, int sp, int dp, int client, int dg, int qp, int ab, int pending)
{
	signal(SIGUSR1, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	struct sockaddr_un aa;
	socklen_t alen = abstract_addr(&aa);
	if (send_all(fifo_w, FIFO_MSG, strlen(FIFO_MSG)) < 0 || send_all(sp, SPAIR_TO_R, strlen(SPAIR_TO_R)) < 0 ||
	    send_all(client, ACCEPTED_TO_R, strlen(ACCEPTED_TO_R)) < 0 || write(client, big, BIG_LEN) != BIG_LEN)
		_exit(2);
	for (int i = 0; i < 2; i++)
		if (send(qp, RECORDS[i], strlen(RECORDS[i]), 0) < 0)
			_exit(5);
	if (sendto(ab, ABSTRACT_MSG, strlen(ABSTRACT_MSG), 0, (struct sockaddr *)&aa, alen) < 0)
		_exit(6);
	for (int i = 0; i < 3; i++)
		if (send(dp, DGRAMS_TO_R[i], strlen(DGRAMS_TO_R[i]), 0) < 0)
			_exit(3);
	for (int i = 0; i < 2; i++)
		if (send(dg, NAMED_DGRAMS[i], strlen(NAMED_DGRAMS[i]), 0) < 0)
			_exit(4);
	int first = 1;
	for (;;) {
		char c;
		ssize_t r = read(ctl, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			_exit(0);
		char err[1024] = "";
		if (first) {
			expect_stream(sp, SPAIR_TO_K, strlen(SPAIR_TO_K), "child spair", err, sizeof(err));
			expect_stream(client, CLIENT_TO_K, strlen(CLIENT_TO_K), "child client", err, sizeof(err));
			expect_stream(pending, LATE_MSG, strlen(LATE_MSG), "child pending client", err, sizeof(err));
			first = 0;
		}
		int fails = 0;
		fails |= send_all(fifo_w, PROBE, strlen(PROBE)) < 0;
		fails |= send(dp, PROBE, strlen(PROBE), 0) < 0;
		fails |= send_all(client, PROBE, strlen(PROBE)) < 0;
		fails |= send_all(pending, PROBE, strlen(PROBE)) < 0;
		fails |= send(dg, PROBE, strlen(PROBE), 0) < 0;
		fails |= send(qp, PROBE, strlen(PROBE), 0) < 0;
		fails |= sendto(ab, PROBE, strlen(PROBE), 0, (struct sockaddr *)&aa, alen) < 0;
		if (fails)
			append(err, sizeof(err), "child: a probe could not be sent (%s); ", strerror(errno));
		char report[1100];
		int n = snprintf(report, sizeof(report), "%-1023s", err[0] ? err : "OK");
		send_all(sp, report, (size_t)n > 1023 ? 1023 : (size_t)n);
	}
}

int main(void)
{
	setsid();
	make_big();
	const char *dir = work_dir("ipc");
	if (snprintf(fifo_path, sizeof(fifo_path), "%s/fifo", dir) >= (int)sizeof(fifo_path) ||
	    snprintf(stream_path, sizeof(stream_path), "%s/stream.sock", dir) >= (int)sizeof(stream_path) ||
	    snprintf(dgram_path, sizeof(dgram_path), "%s/dgram.sock", dir) >= (int)sizeof(dgram_path))
		setup_fail("run directory %s is too long for a socket address", dir);
	unlink(fifo_path);
	unlink(stream_path);
	unlink(dgram_path);

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (mkfifo(fifo_path, 0640) < 0)
		setup_fail("mkfifo %s", fifo_path);
	int fifo_r = open(fifo_path, O_RDONLY | O_NONBLOCK);
	if (fifo_r < 0)
		setup_fail("open fifo for reading");
	int ctl[2], sp[2], dp[2], qp[2];
	if (pipe(ctl) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0 || socketpair(AF_UNIX, SOCK_DGRAM, 0, dp) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET, 0, qp) < 0)
		setup_fail("pipe/socketpair");
	struct sockaddr_un aa;
	socklen_t alen = abstract_addr(&aa);
	int abstract = socket(AF_UNIX, SOCK_DGRAM, 0);
	if (abstract < 0 || bind(abstract, (struct sockaddr *)&aa, alen) < 0)
		setup_fail("bind the abstract name");

	struct sockaddr_un sa, da;
	addr_of(&sa, stream_path);
	addr_of(&da, dgram_path);
	int listener = socket(AF_UNIX, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(listener, 4) < 0)
		setup_fail("listen on %s", stream_path);
	int dgram = socket(AF_UNIX, SOCK_DGRAM, 0);
	if (dgram < 0 || bind(dgram, (struct sockaddr *)&da, sizeof(da)) < 0)
		setup_fail("bind %s", dgram_path);

	pid_t k = fork();
	if (k < 0)
		setup_fail("fork");
	if (k == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		close(ctl[1]);
		close(sp[0]);
		close(dp[0]);
		close(fifo_r);
		close(listener);
		close(dgram);
		close(qp[0]);
		close(abstract);
		int fifo_w = open(fifo_path, O_WRONLY);
		int client = socket(AF_UNIX, SOCK_STREAM, 0);
		int dg = socket(AF_UNIX, SOCK_DGRAM, 0);
		int ab = socket(AF_UNIX, SOCK_DGRAM, 0);
		int pending = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fifo_w < 0 || client < 0 || dg < 0 || ab < 0 || pending < 0 ||
		    connect(client, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    connect(dg, (struct sockaddr *)&da, sizeof(da)) < 0)
			_exit(1);
		child(ctl[0], fifo_w, sp[1], dp[1], client, dg, qp[1], ab, pending_connect(pending, &sa));
	}
	close(ctl[0]);
	close(sp[1]);
	close(dp[1]);
	close(qp[1]);
	int accepted = accept(listener, NULL, NULL), late = -1;
	if (accepted < 0)
		setup_fail("accept");
	if (send_all(sp[0], SPAIR_TO_K, strlen(SPAIR_TO_K)) < 0 ||
	    send_all(accepted, CLIENT_TO_K, strlen(CLIENT_TO_K)) < 0)
		setup_fail("queue data for the child");

	/* Wait until everything the child queues has arrived, without reading any of it. */
	int queued = 0;
	for (int tries = 0; tries < 500 && !queued; tries++) {
		struct pollfd p[6] = { { fifo_r, POLLIN, 0 }, { sp[0], POLLIN, 0 }, { accepted, POLLIN, 0 },
				       { dgram, POLLIN, 0 }, { qp[0], POLLIN, 0 }, { abstract, POLLIN, 0 } };
		char b[64];
		struct pollfd pl = { listener, POLLIN, 0 };
		int inq = 0;
		poll(p, 6, 0);
		poll(&pl, 1, 0);
		ioctl(accepted, FIONREAD, &inq);
		queued = (p[0].revents & POLLIN) && (p[1].revents & POLLIN) && (p[2].revents & POLLIN) &&
			 (p[3].revents & POLLIN) && (p[4].revents & POLLIN) && (p[5].revents & POLLIN) &&
			 (pl.revents & POLLIN) && inq == (int)sizeof(accepted_to_r) &&
			 recv(dp[0], b, sizeof(b), MSG_PEEK | MSG_DONTWAIT) > 0;
		if (!queued)
			sleep_ms(10);
	}
	if (!queued) {
		int st;
		pid_t w = waitpid(k, &st, WNOHANG);
		setup_fail("the child's data did not arrive (child %s, status 0x%x)", w ? "exited" : "running", w ? st : 0);
	}
	sleep_ms_full(200);	/* the child sends all of it before blocking on ctl */
	int st;
	if (waitpid(k, &st, WNOHANG) != 0)
		setup_fail("child exited during setup (status 0x%x)", st);
	say("READY root=%d child=%d", (int)getpid(), (int)k);

	int first = 1;
	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		char err[2048] = "";
		if (first) {
			expect_stream(fifo_r, FIFO_MSG, strlen(FIFO_MSG), "fifo", err, sizeof(err));
			expect_stream(sp[0], SPAIR_TO_R, strlen(SPAIR_TO_R), "spair", err, sizeof(err));
			expect_stream(accepted, accepted_to_r, sizeof(accepted_to_r), "accepted", err, sizeof(err));
			for (int i = 0; i < 2; i++)
				expect_dgram(qp[0], RECORDS[i], "seqpacket", err, sizeof(err));
			expect_dgram(abstract, ABSTRACT_MSG, "abstract dgram", err, sizeof(err));
			for (int i = 0; i < 3; i++)
				expect_dgram(dp[0], DGRAMS_TO_R[i], "dpair", err, sizeof(err));
			for (int i = 0; i < 2; i++)
				expect_dgram(dgram, NAMED_DGRAMS[i], "named dgram", err, sizeof(err));
			struct pollfd pl = { listener, POLLIN, 0 };
			if (poll(&pl, 1, 2000) != 1 || (late = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) < 0)
				append(err, sizeof(err), "the pending connection: nothing to accept (%s); ", strerror(errno));
			else if (send_all(late, LATE_MSG, strlen(LATE_MSG)) < 0)
				append(err, sizeof(err), "the pending connection: cannot send (%s); ", strerror(errno));
			first = 0;
		}
		if (write(ctl[1], "c", 1) != 1)
			append(err, sizeof(err), "ctl write: %s; ", strerror(errno));
		expect_stream(fifo_r, PROBE, strlen(PROBE), "fifo probe", err, sizeof(err));
		expect_dgram(dp[0], PROBE, "dpair probe", err, sizeof(err));
		expect_stream(accepted, PROBE, strlen(PROBE), "accepted probe", err, sizeof(err));
		if (late >= 0)
			expect_stream(late, PROBE, strlen(PROBE), "late-accepted probe", err, sizeof(err));
		expect_dgram(dgram, PROBE, "named dgram probe", err, sizeof(err));
		expect_dgram(qp[0], PROBE, "seqpacket probe", err, sizeof(err));
		expect_dgram(abstract, PROBE, "abstract probe", err, sizeof(err));
		char report[1024];
		size_t got = 0;
		for (int tries = 0; got < 1023 && tries < 300; tries++) {
			ssize_t r = recv(sp[0], report + got, 1023 - got, MSG_DONTWAIT);
			if (r > 0)
				got += (size_t)r;
			else if (r == 0 || (errno != EAGAIN && errno != EINTR))
				break;
			else
				sleep_ms(10);
		}
		report[got] = 0;
		for (char *e = report + got; e > report && e[-1] == ' '; e--)
			e[-1] = 0;
		if (got != 1023)
			append(err, sizeof(err), "child report: %zu of 1023 bytes; ", got);
		else if (strcmp(report, "OK"))
			append(err, sizeof(err), "%s", report);
		if (waitpid(k, &st, WNOHANG) != 0)
			append(err, sizeof(err), "child gone; ");
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK root=%d child=%d channels=9", (int)getpid(), (int)k);
	}
}
