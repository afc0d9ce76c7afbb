/* cflags: -pthread */
/* blockers - one child per kind of system call a program waits in, each blocked inside it.
 *
 * The tree is snapshotted without SIGSTOP: every child sleeps inside its call (read, write
 * to a full pipe, recvfrom, recvmsg, accept, poll, ppoll, select, pselect6, epoll_wait,
 * epoll_pwait, nanosleep, clock_nanosleep relative and absolute, futex waits under a mutex
 * and condition variables, wait4, waitid, pause, rt_sigsuspend, rt_sigtimedwait). After a
 * restore each call must end as it would after a handled signal: restarted, or returning
 * EINTR where the kernel (and CRIU) do so; a call that comes back with anything else
 * (ENOSYS from a broken restore, a short or doubled read, a wrong status) fails the check.
 *
 * Every call is made through syscall(2) so that the number it blocks in is the one named
 * (glibc would turn nanosleep into clock_nanosleep, select into pselect6, ...), except the
 * futex waits, which are pthreads'. A child retries a call that fails with EINTR before it
 * was poked (a real program does; CRIU's restore gives one such EINTR to some kinds) and
 * counts it. Nothing runs after READY until the check, so criu's own dump of the tree a
 * few seconds later sees the same calls.
 *
 * Usage:  blockers [partial-write | unknown-call]
 *         partial-write adds a child blocked in one write() of 1 MiB into a pipe nobody
 *         reads: it blocks having moved 64 KiB; criu's seize ends it short with that
 *         count (a memory-only dump reads it from the call's iterator on the kernel
 *         stack) and the child's loop writes the rest, as a careful program's does.
 *         unknown-call adds a child blocked in recvmmsg(), a call whose interruption a
 *         memory-only dump does not model, so it must refuse it by name.
 * READY:  READY root=PID n=OPS ops=name,name,...
 * CHECK:  (on SIGUSR1: the root pokes every child (data, connections, SIGUSR2, a grandchild's
 *         exit), collects their verdicts and reaps them; later SIGUSR1s repeat the verdict)
 *         CHECK OK ops=N spurious_eintr=K
 *         CHECK FAIL op: what; op: what...
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#define MAX_OPS 32
#define RECORD 512
/* A week: absolute deadlines (clock_nanosleep on CLOCK_REALTIME, timed condition waits) are
 * wall-clock times, so a recording restored more than LONG_S after it was made would see its
 * sleepers time out. An hour was too short for a CI run that records first and restores later.
 * 604800000 ms still fits poll's int timeout. */
#define LONG_S (7 * 24 * 3600)
#define PARTIAL_BYTES (1 << 20)
#define CHECK_DEADLINE_MS 20000

struct op;
typedef void (*block_fn)(struct op *, char *err, size_t errlen);
typedef void (*poke_fn)(struct op *, char *err, size_t errlen);

struct op {
	const char *name;
	block_fn block;
	poke_fn poke;
	int by_signal;	/* poked with SIGUSR2, repeated until the child reports */
	int fd[2];	/* the op's pipe or socket pair (root keeps its end) */
	pid_t pid;
	int report[2];
	int reported;
	char verdict[REPORT_LEN + 1];
};

static struct op ops[MAX_OPS];
static int nops;
static pid_t root_pid;
static volatile sig_atomic_t poked;
static unsigned spurious;
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int listen_fd = -1;

static void on_usr2(int sig)
{
	(void)sig;
	poked = 1;
}

#define FAILF(...) snprintf(err, errlen, __VA_ARGS__)

/* Call `expr` until it is not an EINTR that came before the poke. */
#define RETRY(r, expr)                                               \
	do {                                                         \
		(r) = (expr);                                        \
		if ((r) == -1 && errno == EINTR && !poked) {         \
			spurious++;                                  \
			continue;                                    \
		}                                                    \
		break;                                               \
	} while (1)

static void expect_token(char *err, size_t errlen, long r, const char *buf, const char *token)
{
	if (r != (long)strlen(token) || memcmp(buf, token, strlen(token)) != 0)
		FAILF("returned %ld (errno %d), want %zu bytes '%s'", r, r < 0 ? errno : 0, strlen(token), token);
}

/* ----------------------------------------------------------------- data on pipes and sockets */

static void block_read_pipe(struct op *o, char *err, size_t errlen)
{
	char buf[64];
	long r;
	RETRY(r, syscall(SYS_read, o->fd[0], buf, sizeof(buf)));
	expect_token(err, errlen, r, buf, "token-1");
}

static void poke_write_token(struct op *o, char *err, size_t errlen)
{
	if (write(o->fd[1], "token-1", 7) != 7)
		FAILF("root cannot write the token: errno %d", errno);
}

struct record {
	uint32_t seq;
	uint32_t last;
	char fill[RECORD - 8];
};

static void block_write_full_pipe(struct op *o, char *err, size_t errlen)
{
	struct record rec;
	uint32_t seq = 0;
	fcntl(o->fd[1], F_SETFL, O_NONBLOCK);
	for (;; seq++) {
		memset(&rec, 'a' + seq % 26, sizeof(rec));
		rec.seq = seq;
		rec.last = 0;
		if (write(o->fd[1], &rec, sizeof(rec)) != sizeof(rec))
			break;
	}
	if (errno != EAGAIN) {
		FAILF("filling the pipe: errno %d", errno);
		return;
	}
	fcntl(o->fd[1], F_SETFL, 0);
	memset(&rec, 'a' + seq % 26, sizeof(rec));
	rec.seq = seq;
	rec.last = 1;
	long r;
	RETRY(r, syscall(SYS_write, o->fd[1], &rec, sizeof(rec)));
	if (r != sizeof(rec))
		FAILF("write of the record that blocked returned %ld (errno %d)", r, r < 0 ? errno : 0);
}

static void poke_drain_records(struct op *o, char *err, size_t errlen)
{
	struct record rec;
	for (uint32_t seq = 0;; seq++) {
		if (read_full(o->fd[0], &rec, sizeof(rec)) < 0) {
			FAILF("root read of record %u failed", seq);
			return;
		}
		char want = 'a' + seq % 26;
		if (rec.seq != seq || rec.fill[0] != want || rec.fill[RECORD - 9] != want) {
			FAILF("record %u arrived as record %u (lost or doubled data)", seq, rec.seq);
			return;
		}
		if (rec.last)
			return;
	}
}

static void block_recvfrom_stream(struct op *o, char *err, size_t errlen)
{
	char buf[64];
	long r;
	RETRY(r, syscall(SYS_recvfrom, o->fd[0], buf, sizeof(buf), 0, NULL, NULL));
	expect_token(err, errlen, r, buf, "token-1");
}

static void block_recvmsg_dgram(struct op *o, char *err, size_t errlen)
{
	char buf[64];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	long r;
	RETRY(r, syscall(SYS_recvmsg, o->fd[0], &msg, 0));
	expect_token(err, errlen, r, buf, "token-1");
}

/* recvmmsg: a real call (batched receives) whose interruption ovm-offline does not model */
static void block_recvmmsg_dgram(struct op *o, char *err, size_t errlen)
{
	char buf[64];
	struct iovec iov = { buf, sizeof(buf) };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };
	long r;
	RETRY(r, syscall(SYS_recvmmsg, o->fd[0], &mm, 1, 0, NULL));
	if (r != 1 || mm.msg_len != 7 || memcmp(buf, "token-1", 7) != 0)
		FAILF("recvmmsg returned %ld, %u bytes (errno %d)", r, mm.msg_len, r < 0 ? errno : 0);
}

static void block_accept(struct op *o, char *err, size_t errlen)
{
	(void)o;
	long r;
	RETRY(r, syscall(SYS_accept, listen_fd, NULL, NULL));
	if (r < 0) {
		FAILF("returned -1 (errno %d)", errno);
		return;
	}
	char buf[64];
	long n = read(r, buf, sizeof(buf));
	expect_token(err, errlen, n, buf, "token-1");
}

static void poke_connect(struct op *o, char *err, size_t errlen)
{
	(void)o;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, sock_path, sizeof(sock_path));
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || write(s, "token-1", 7) != 7)
		FAILF("root cannot connect to %s: errno %d", sock_path, errno);
	if (s >= 0)
		close(s);
}

static void block_write_partial(struct op *o, char *err, size_t errlen)
{
	unsigned char *buf = malloc(PARTIAL_BYTES);
	if (!buf) {
		FAILF("malloc");
		return;
	}
	for (int i = 0; i < PARTIAL_BYTES; i++)
		buf[i] = (unsigned char)mix64((uint64_t)i);
	/* A careful program writes the rest after a short write, as a signal (or criu's seize)
	 * ends a pipe write that moved part of its bytes with that part's count. */
	long done = 0;
	while (done < PARTIAL_BYTES) {
		long r;
		RETRY(r, syscall(SYS_write, o->fd[1], buf + done, PARTIAL_BYTES - done));
		if (r <= 0) {
			FAILF("write of 1 MiB returned %ld after %ld bytes (errno %d)", r, done, r < 0 ? errno : 0);
			break;
		}
		done += r;
	}
	free(buf);
}

static void poke_drain_partial(struct op *o, char *err, size_t errlen)
{
	unsigned char *buf = malloc(PARTIAL_BYTES);
	if (!buf || read_full(o->fd[0], buf, PARTIAL_BYTES) < 0) {
		FAILF("root cannot read the 1 MiB back");
		free(buf);
		return;
	}
	for (int i = 0; i < PARTIAL_BYTES; i++)
		if (buf[i] != (unsigned char)mix64((uint64_t)i)) {
			FAILF("byte %d of the 1 MiB write is wrong", i);
			break;
		}
	free(buf);
}

/* ----------------------------------------------------------------------- readiness waits */

static void expect_ready(char *err, size_t errlen, long r, int revents_ok)
{
	if (r != 1 || !revents_ok)
		FAILF("returned %ld (errno %d), want 1 ready fd", r, r < 0 ? errno : 0);
}

static void block_poll(struct op *o, char *err, size_t errlen, int timeout_ms)
{
	struct pollfd p = { .fd = o->fd[0], .events = POLLIN };
	long r;
	RETRY(r, syscall(SYS_poll, &p, 1, timeout_ms));
	expect_ready(err, errlen, r, p.revents == POLLIN);
}

static void block_poll_inf(struct op *o, char *err, size_t errlen) { block_poll(o, err, errlen, -1); }
static void block_poll_timeout(struct op *o, char *err, size_t errlen) { block_poll(o, err, errlen, LONG_S * 1000); }

static void block_ppoll(struct op *o, char *err, size_t errlen)
{
	struct pollfd p = { .fd = o->fd[0], .events = POLLIN };
	uint64_t mask = 0;
	long r;
	RETRY(r, syscall(SYS_ppoll, &p, 1, NULL, &mask, 8));
	expect_ready(err, errlen, r, p.revents == POLLIN);
}

static void block_select_timeout(struct op *o, char *err, size_t errlen)
{
	fd_set rfds;
	struct timeval tv;
	long r;
	do {
		FD_ZERO(&rfds);
		FD_SET(o->fd[0], &rfds);
		tv.tv_sec = LONG_S;
		tv.tv_usec = 0;
		r = syscall(SYS_select, o->fd[0] + 1, &rfds, NULL, NULL, &tv);
	} while (r == -1 && errno == EINTR && !poked && ++spurious);
	expect_ready(err, errlen, r, FD_ISSET(o->fd[0], &rfds));
	if (!err[0] && (tv.tv_sec < 0 || tv.tv_sec > LONG_S))
		FAILF("left timeval %ld s", (long)tv.tv_sec);
}

static void block_pselect6(struct op *o, char *err, size_t errlen)
{
	fd_set rfds;
	long r;
	do {
		FD_ZERO(&rfds);
		FD_SET(o->fd[0], &rfds);
		r = syscall(SYS_pselect6, o->fd[0] + 1, &rfds, NULL, NULL, NULL, NULL);
	} while (r == -1 && errno == EINTR && !poked && ++spurious);
	expect_ready(err, errlen, r, FD_ISSET(o->fd[0], &rfds));
}

static void block_epoll(struct op *o, char *err, size_t errlen, int timeout_ms, int with_mask)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x5eed };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, o->fd[0], &ev) < 0) {
		FAILF("epoll set-up: errno %d", errno);
		return;
	}
	uint64_t mask = 0;
	struct epoll_event out;
	long r;
	if (with_mask)
		RETRY(r, syscall(SYS_epoll_pwait, ep, &out, 1, timeout_ms, &mask, 8));
	else
		RETRY(r, syscall(SYS_epoll_wait, ep, &out, 1, timeout_ms));
	expect_ready(err, errlen, r, r == 1 && out.data.u64 == 0x5eed && (out.events & EPOLLIN));
}

static void block_epoll_wait(struct op *o, char *err, size_t errlen) { block_epoll(o, err, errlen, -1, 0); }
static void block_epoll_wait_timeout(struct op *o, char *err, size_t errlen) { block_epoll(o, err, errlen, LONG_S * 1000, 0); }
static void block_epoll_pwait(struct op *o, char *err, size_t errlen) { block_epoll(o, err, errlen, -1, 1); }

static void poke_write_byte(struct op *o, char *err, size_t errlen)
{
	if (write(o->fd[1], "x", 1) != 1)
		FAILF("root cannot write: errno %d", errno);
}

/* ----------------------------------------------------------------------- woken by a signal */

static void expect_eintr(char *err, size_t errlen, long r, int e)
{
	if (r != -1 || e != EINTR || !poked)
		FAILF("returned %ld (errno %d) with poked=%d, want EINTR from the poke", r, r < 0 ? e : 0, (int)poked);
}

static void block_nanosleep(struct op *o, char *err, size_t errlen)
{
	(void)o;
	struct timespec req = { LONG_S, 0 }, rem;
	long r;
	do {
		rem.tv_sec = rem.tv_nsec = 0;
		r = syscall(SYS_nanosleep, &req, &rem);
	} while (r == -1 && errno == EINTR && !poked && ++spurious);
	expect_eintr(err, errlen, r, errno);
	if (!err[0] && (rem.tv_sec < 0 || rem.tv_sec > LONG_S || rem.tv_nsec < 0 || rem.tv_nsec >= 1000000000L))
		FAILF("left rem %ld.%09ld", (long)rem.tv_sec, rem.tv_nsec);
}

static void block_clock_nanosleep(char *err, size_t errlen, clockid_t clock, int flags)
{
	struct timespec t;
	clock_gettime(clock, &t);
	if (!(flags & TIMER_ABSTIME))
		t.tv_sec = 0;
	t.tv_sec += LONG_S;
	struct timespec rem;
	long r;
	RETRY(r, syscall(SYS_clock_nanosleep, clock, flags, &t, &rem));
	expect_eintr(err, errlen, r, errno);
}

static void block_clock_nanosleep_rel(struct op *o, char *err, size_t errlen)
{
	(void)o;
	block_clock_nanosleep(err, errlen, CLOCK_MONOTONIC, 0);
}

static void block_clock_nanosleep_abs(struct op *o, char *err, size_t errlen)
{
	(void)o;
	block_clock_nanosleep(err, errlen, CLOCK_REALTIME, TIMER_ABSTIME);
}

static void block_pause(struct op *o, char *err, size_t errlen)
{
	(void)o;
	long r;
	RETRY(r, syscall(SYS_pause));
	expect_eintr(err, errlen, r, errno);
}

static void block_usr2(sigset_t *old)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR2);
	sigprocmask(SIG_BLOCK, &s, old);
}

static void block_sigsuspend(struct op *o, char *err, size_t errlen)
{
	(void)o;
	block_usr2(NULL);
	uint64_t none = 0;
	long r;
	RETRY(r, syscall(SYS_rt_sigsuspend, &none, 8));
	expect_eintr(err, errlen, r, errno);
}

static void sigtimedwait_for_usr2(char *err, size_t errlen, const struct timespec *ts)
{
	block_usr2(NULL);
	uint64_t set = 1ULL << (SIGUSR2 - 1);
	siginfo_t info;
	long r;
	do {
		memset(&info, 0, sizeof(info));
		r = syscall(SYS_rt_sigtimedwait, &set, &info, ts, 8);
	} while (r == -1 && errno == EINTR && ++spurious);
	if (r != SIGUSR2 || info.si_signo != SIGUSR2 || info.si_pid != root_pid)
		FAILF("returned %ld (errno %d) signo %d from pid %d, want SIGUSR2 from %d", r, r < 0 ? errno : 0,
		      info.si_signo, (int)info.si_pid, (int)root_pid);
}

static void block_sigtimedwait(struct op *o, char *err, size_t errlen)
{
	(void)o;
	sigtimedwait_for_usr2(err, errlen, NULL);
}

static void block_sigtimedwait_timeout(struct op *o, char *err, size_t errlen)
{
	(void)o;
	struct timespec ts = { LONG_S, 0 };
	sigtimedwait_for_usr2(err, errlen, &ts);
}

/* ------------------------------------------------------------------------ processes, futexes */

static void block_wait(struct op *o, char *err, size_t errlen, int use_waitid, int status)
{
	pid_t gc = fork();
	if (gc < 0) {
		FAILF("fork: errno %d", errno);
		return;
	}
	if (gc == 0) {
		char c;
		while (read(o->fd[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(status);
	}
	long r;
	if (use_waitid) {
		siginfo_t si;
		memset(&si, 0, sizeof(si));
		RETRY(r, syscall(SYS_waitid, P_PID, gc, &si, WEXITED, NULL));
		if (r != 0 || si.si_pid != gc || si.si_code != CLD_EXITED || si.si_status != status)
			FAILF("returned %ld (errno %d) pid %d code %d status %d, want %d exiting %d", r, r < 0 ? errno : 0,
			      (int)si.si_pid, si.si_code, si.si_status, (int)gc, status);
	} else {
		int st = 0;
		RETRY(r, syscall(SYS_wait4, gc, &st, 0, NULL));
		if (r != gc || !WIFEXITED(st) || WEXITSTATUS(st) != status)
			FAILF("returned %ld (errno %d) status 0x%x, want %d exiting %d", r, r < 0 ? errno : 0, st, (int)gc,
			      status);
	}
}

static void block_wait4(struct op *o, char *err, size_t errlen) { block_wait(o, err, errlen, 0, 42); }
static void block_waitid(struct op *o, char *err, size_t errlen) { block_wait(o, err, errlen, 1, 43); }

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER, cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int predicate, waiting;

static void *lock_waiter(void *arg)
{
	(void)arg;
	__atomic_add_fetch(&waiting, 1, __ATOMIC_SEQ_CST);
	int r = pthread_mutex_lock(&held);
	if (r == 0)
		pthread_mutex_unlock(&held);
	return (void *)(intptr_t)(r ? r : predicate ? 0 : -1);
}

static void *cond_waiter(void *arg)
{
	int timed = arg != NULL;
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += LONG_S;
	int r = 0;
	pthread_mutex_lock(&cond_lock);
	__atomic_add_fetch(&waiting, 1, __ATOMIC_SEQ_CST);
	while (!predicate && r == 0)
		r = timed ? pthread_cond_timedwait(&cond, &cond_lock, &deadline) : pthread_cond_wait(&cond, &cond_lock);
	pthread_mutex_unlock(&cond_lock);
	return (void *)(intptr_t)(r ? r : predicate ? 0 : -1);
}

static void block_futex(struct op *o, char *err, size_t errlen)
{
	static const char *names[] = { "mutex", "condvar", "timed condvar" };
	pthread_t t[3];
	pthread_mutex_lock(&held);
	if (pthread_create(&t[0], NULL, lock_waiter, NULL) || pthread_create(&t[1], NULL, cond_waiter, NULL) ||
	    pthread_create(&t[2], NULL, cond_waiter, (void *)1)) {
		FAILF("pthread_create");
		return;
	}
	while (__atomic_load_n(&waiting, __ATOMIC_SEQ_CST) < 3)
		sleep_ms(10);
	/* the condition waiters released cond_lock inside their waits */
	pthread_mutex_lock(&cond_lock);
	pthread_mutex_unlock(&cond_lock);
	char c;
	long r;
	RETRY(r, syscall(SYS_read, o->fd[0], &c, 1));
	if (r != 1)
		FAILF("read of the poke returned %ld (errno %d); ", r, r < 0 ? errno : 0);
	pthread_mutex_lock(&cond_lock);
	predicate = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&cond_lock);
	pthread_mutex_unlock(&held);
	for (int i = 0; i < 3; i++) {
		void *ret;
		pthread_join(t[i], &ret);
		if (ret)
			append(err, errlen, "%s waiter returned %ld; ", names[i], (long)(intptr_t)ret);
	}
}

/* -------------------------------------------------------------------------------- the tree */

enum fdkind { NONE, PIPE, STREAM, DGRAM };

static void add(const char *name, enum fdkind kind, block_fn block, poke_fn poke, int by_signal)
{
	struct op *o = &ops[nops++];
	o->name = name;
	o->block = block;
	o->poke = poke;
	o->by_signal = by_signal;
	o->fd[0] = o->fd[1] = -1;
	int sv[2];
	if (kind == PIPE && pipe(o->fd) < 0)
		setup_fail("pipe for %s", name);
	if ((kind == STREAM || kind == DGRAM) &&
	    socketpair(AF_UNIX, kind == STREAM ? SOCK_STREAM : SOCK_DGRAM, 0, sv) < 0)
		setup_fail("socketpair for %s", name);
	if (kind == STREAM || kind == DGRAM) {
		o->fd[0] = sv[0];	/* the child's end */
		o->fd[1] = sv[1];	/* the root's */
	}
	if (pipe(o->report) < 0)
		setup_fail("report pipe for %s", name);
}

static void setup_ops(int partial, int unknown)
{
	add("read-pipe", PIPE, block_read_pipe, poke_write_token, 0);
	add("write-full-pipe", PIPE, block_write_full_pipe, poke_drain_records, 0);
	add("recvfrom-stream", STREAM, block_recvfrom_stream, poke_write_token, 0);
	add("recvmsg-dgram", DGRAM, block_recvmsg_dgram, poke_write_token, 0);
	add("accept", NONE, block_accept, poke_connect, 0);
	add("poll", PIPE, block_poll_inf, poke_write_byte, 0);
	add("poll-timeout", PIPE, block_poll_timeout, poke_write_byte, 0);
	add("ppoll", PIPE, block_ppoll, poke_write_byte, 0);
	add("select-timeout", PIPE, block_select_timeout, poke_write_byte, 0);
	add("pselect6", PIPE, block_pselect6, poke_write_byte, 0);
	add("epoll-wait", PIPE, block_epoll_wait, poke_write_byte, 0);
	add("epoll-wait-timeout", PIPE, block_epoll_wait_timeout, poke_write_byte, 0);
	add("epoll-pwait", PIPE, block_epoll_pwait, poke_write_byte, 0);
	add("nanosleep", NONE, block_nanosleep, NULL, 1);
	add("clock-nanosleep-rel", NONE, block_clock_nanosleep_rel, NULL, 1);
	add("clock-nanosleep-abs", NONE, block_clock_nanosleep_abs, NULL, 1);
	add("pause", NONE, block_pause, NULL, 1);
	add("sigsuspend", NONE, block_sigsuspend, NULL, 1);
	add("sigtimedwait", NONE, block_sigtimedwait, NULL, 1);
	add("sigtimedwait-timeout", NONE, block_sigtimedwait_timeout, NULL, 1);
	add("futex", PIPE, block_futex, poke_write_byte, 0);
	add("wait4", PIPE, block_wait4, poke_write_byte, 0);
	add("waitid", PIPE, block_waitid, poke_write_byte, 0);
	if (partial)
		add("write-partial", PIPE, block_write_partial, poke_drain_partial, 0);
	if (unknown)
		add("recvmmsg-dgram", DGRAM, block_recvmmsg_dgram, poke_write_token, 0);
}

static void setup_listener(void)
{
	const char *dir = work_dir("blockers");
	if (strlen(dir) + sizeof("/accept.sock") > sizeof(sock_path))
		setup_fail("socket path under %s is too long", dir);
	strcpy(sock_path, dir);
	strcat(sock_path, "/accept.sock");
	unlink(sock_path);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, sock_path, sizeof(sock_path));
	listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(listen_fd, 4) < 0)
		setup_fail("listening on %s", sock_path);
}

static void run_child(struct op *o, int armed)
{
	signal(SIGUSR1, SIG_IGN);
	install_handler(SIGUSR2, on_usr2, 0);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (write(armed, "a", 1) != 1)
		_exit(1);
	char err[REPORT_LEN - 32] = "";
	o->block(o, err, sizeof(err));
	char report[REPORT_LEN];
	if (err[0])
		snprintf(report, sizeof(report), "FAIL %s", err);
	else
		snprintf(report, sizeof(report), "spurious=%u", spurious);
	send_report(o->report[1], report);
	_exit(0);
}

static void check(char *verdict, size_t size)
{
	char poke_err[MAX_OPS][256];
	for (int i = 0; i < nops; i++) {
		poke_err[i][0] = 0;
		if (ops[i].by_signal)
			kill(ops[i].pid, SIGUSR2);
		else
			ops[i].poke(&ops[i], poke_err[i], sizeof(poke_err[i]));
	}
	for (int waited = 0; waited < CHECK_DEADLINE_MS; waited += 20) {
		int left = 0;
		for (int i = 0; i < nops; i++) {
			struct op *o = &ops[i];
			if (o->reported)
				continue;
			struct pollfd p = { .fd = o->report[0], .events = POLLIN };
			if (poll(&p, 1, 0) == 1) {
				recv_report(o->report[0], o->verdict);
				o->reported = 1;
			} else {
				left++;
				if (o->by_signal && waited % 200 == 0)
					kill(o->pid, SIGUSR2);	/* it may have been between two calls */
			}
		}
		if (!left)
			break;
		sleep_ms(20);
	}
	unsigned total_spurious = 0;
	char fails[3000] = "";
	for (int i = 0; i < nops; i++) {
		struct op *o = &ops[i];
		if (poke_err[i][0])
			append(fails, sizeof(fails), "%s: %s; ", o->name, poke_err[i]);
		if (!o->reported)
			append(fails, sizeof(fails), "%s: no verdict; ", o->name);
		else if (strncmp(o->verdict, "spurious=", 9) == 0)
			total_spurious += (unsigned)atoi(o->verdict + 9);
		else
			append(fails, sizeof(fails), "%s: %s; ", o->name, o->verdict);
		int st;
		if (o->reported && waitpid(o->pid, &st, 0) == o->pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			append(fails, sizeof(fails), "%s: child ended with status 0x%x; ", o->name, st);
	}
	if (fails[0])
		snprintf(verdict, size, "CHECK FAIL %s", fails);
	else
		snprintf(verdict, size, "CHECK OK ops=%d spurious_eintr=%u", nops, total_spurious);
}

int main(int argc, char **argv)
{
	setsid();
	root_pid = getpid();
	signal(SIGPIPE, SIG_IGN);
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	setup_listener();
	setup_ops(argc > 1 && strcmp(argv[1], "partial-write") == 0, argc > 1 && strcmp(argv[1], "unknown-call") == 0);

	int armed[2];
	if (pipe(armed) < 0)
		setup_fail("armed pipe");
	char names[1024] = "";
	for (int i = 0; i < nops; i++) {
		append(names, sizeof(names), "%s%s", i ? "," : "", ops[i].name);
		pid_t pid = fork();
		if (pid < 0)
			setup_fail("fork for %s", ops[i].name);
		if (pid == 0)
			run_child(&ops[i], armed[1]);
		ops[i].pid = pid;
	}
	for (int i = 0; i < nops; i++) {
		char c;
		struct pollfd p = { .fd = armed[0], .events = POLLIN };
		if (poll(&p, 1, 10000) != 1 || read(armed[0], &c, 1) != 1)
			setup_fail("only %d of %d children armed", i, nops);
	}
	sleep_ms(300);	/* let the last ones get into their calls (the futex child into its read) */
	say("READY root=%d n=%d ops=%s", getpid(), nops, names);

	static char verdict[4096];
	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		if (!verdict[0])
			check(verdict, sizeof(verdict));
		say("%s", verdict);
	}
}
