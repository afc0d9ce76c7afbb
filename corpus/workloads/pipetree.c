/* cflags: */
/* pipetree - a small process tree joined by a ring of pipes.
 *
 *   root R --p1--> A --p2--> C --p3--> B --p4--> R        (tree: R->A->C, R->B)
 *
 * R writes a token {seq, errs, pids} to p1 every 200 ms.  Each stage checks
 * that it sees consecutive sequence numbers (no loss, no duplicates), ORs its
 * own sticky error bit into the token, stamps its pid and forwards it.  A only
 * takes a token from p1 when more than LAG tokens are queued there (checked
 * with FIONREAD every 100 ms), so p1 always holds >= LAG tokens: there is
 * pipe data in flight at checkpoint time, and losing it shows up as a gap.
 * A sleeps in nanosleep, C and B block in read(); all share R's process group.
 * R sleeps in nanosleep between ticks and drains p4 without blocking.
 *
 * Error bits: 1 = A saw a gap, 2 = C, 4 = B, 8 = R (returning tokens).
 *
 * READY line:  READY root=R a=A c=C b=B lag=2 interval_ms=200
 * CHECK line:  CHECK OK seq=N advanced=M p1_queued=Q root=R a=A c=C b=B
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#define LAG 2
#define TICK_MS 200

struct token {
	uint64_t seq;
	uint32_t errs;
	int32_t pid_a, pid_c, pid_b;
};

static int p[4][2];	/* p[0]=p1 ... p[3]=p4 */

static void child_signals(void)
{
	signal(SIGPIPE, SIG_DFL);	/* downstream reader gone: die quietly */
	signal(SIGUSR1, SIG_IGN);	/* only the root answers SIGUSR1 */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Close every pipe end except the two this stage uses. */
static void keep_only(int rfd, int wfd)
{
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			if (p[i][j] != rfd && p[i][j] != wfd)
				close(p[i][j]);
}

/* C and B: blocking relay with sequence check. */
static void relay(const char *name, int rfd, int wfd, uint32_t bit, int which)
{
	uint64_t expect = 0;
	uint32_t errs = 0;
	struct token t;
	while (read_full(rfd, &t, sizeof(t)) == 0) {
		if (t.seq != expect && !(errs & bit)) {
			say("pipetree %s: expected seq %llu got %llu", name,
			    (unsigned long long)expect, (unsigned long long)t.seq);
			errs |= bit;
		}
		expect = t.seq + 1;
		t.errs |= errs;
		if (which == 'c')
			t.pid_c = getpid();
		else
			t.pid_b = getpid();
		if (write_full(wfd, &t, sizeof(t)) < 0)
			break;
	}
	_exit(0);
}

static void stage_c(void)
{
	child_signals();
	keep_only(p[1][0], p[2][1]);
	relay("C", p[1][0], p[2][1], 2, 'c');
}

/* A: keeps LAG tokens queued in p1, forwards the rest to C. */
static void stage_a(pid_t root)
{
	child_signals();
	pid_t c = fork();
	if (c < 0)
		_exit(1);
	if (c == 0)
		stage_c();
	keep_only(p[0][0], p[1][1]);
	uint64_t expect = 0;
	uint32_t errs = 0;
	while (getppid() == root) {
		int n = 0;
		if (ioctl(p[0][0], FIONREAD, &n) < 0)
			break;
		while (n >= (int)((LAG + 1) * sizeof(struct token))) {
			struct token t;
			if (read_full(p[0][0], &t, sizeof(t)) < 0)
				_exit(1);
			n -= (int)sizeof(t);
			if (t.seq != expect && !(errs & 1)) {
				say("pipetree A: expected seq %llu got %llu",
				    (unsigned long long)expect, (unsigned long long)t.seq);
				errs |= 1;
			}
			expect = t.seq + 1;
			t.errs |= errs;
			t.pid_a = getpid();
			if (write_full(p[1][1], &t, sizeof(t)) < 0)
				_exit(1);
		}
		sleep_ms(TICK_MS / 2);
	}
	_exit(0);
}

static void stage_b(void)
{
	child_signals();
	keep_only(p[2][0], p[3][1]);
	relay("B", p[2][0], p[3][1], 4, 'b');
}

int main(void)
{
	setsid();
	pid_t root = getpid();

	install_handler(SIGUSR1, on_usr1, SA_RESTART);
	signal(SIGPIPE, SIG_IGN);	/* a dead child shows up as EPIPE, not our death */

	for (int i = 0; i < 4; i++)
		if (pipe(p[i]) < 0)
			setup_fail("pipe");
	pid_t a = fork();
	if (a < 0)
		setup_fail("fork A");
	if (a == 0)
		stage_a(root);
	pid_t b = fork();
	if (b < 0)
		setup_fail("fork B");
	if (b == 0)
		stage_b();
	keep_only(p[3][0], p[0][1]);
	int wfd = p[0][1], rfd = p[3][0];
	if (fcntl(wfd, F_SETFL, O_NONBLOCK) < 0 || fcntl(rfd, F_SETFL, O_NONBLOCK) < 0)
		setup_fail("O_NONBLOCK");

	uint64_t next = 0, back = 0;	/* next seq to send / expected back */
	uint32_t errs = 0;
	struct token last = { 0 };
	char problems[512] = "";
	int ready = 0, check_ticks = -1, c = 0;
	uint64_t back_at_check = 0;

	for (long tick = 0;; tick++) {
		struct token t = { .seq = next };
		ssize_t w = write(wfd, &t, sizeof(t));
		if (w == (ssize_t)sizeof(t))
			next++;
		else if (!problems[0])
			append(problems, sizeof(problems), "write p1: %s; ",
			       w < 0 ? strerror(errno) : "short");

		while (read(rfd, &t, sizeof(t)) == (ssize_t)sizeof(t)) {
			if (t.seq != back && !(errs & 8)) {
				append(problems, sizeof(problems), "R expected seq %llu got %llu; ",
				       (unsigned long long)back, (unsigned long long)t.seq);
				errs |= 8;
			}
			back = t.seq + 1;
			errs |= t.errs;
			last = t;
		}

		int st;
		pid_t dead;
		while ((dead = waitpid(-1, &st, WNOHANG)) > 0)
			append(problems, sizeof(problems), "child %d died status=0x%x; ",
			       (int)dead, st);

		if (!ready && back > 0) {
			if (last.pid_a != a || last.pid_b != b || last.pid_c <= 0)
				setup_fail("token pids a=%d b=%d c=%d", last.pid_a, last.pid_b, last.pid_c);
			if (errs || problems[0])
				setup_fail("chain errors 0x%x %s", errs, problems);
			say("READY root=%d a=%d c=%d b=%d lag=%d interval_ms=%d",
			    (int)root, (int)a, last.pid_c, (int)b, LAG, TICK_MS);
			ready = 1;
			c = last.pid_c;
		} else if (!ready && tick > 50) {
			setup_fail("no token came back after %ld ticks %s", tick, problems);
		}

		if (usr1_flag && ready && check_ticks < 0) {
			usr1_flag = 0;
			back_at_check = back;
			check_ticks = 1000 / TICK_MS;	/* watch the ring for ~1 s */
		}
		if (check_ticks > 0 && --check_ticks == 0) {
			check_ticks = -1;
			char err[1024] = "";
			int q = -1;
			ioctl(wfd, FIONREAD, &q);
			if (back < back_at_check + 2)
				append(err, sizeof(err), "ring stalled (seq %llu -> %llu); ",
				       (unsigned long long)back_at_check, (unsigned long long)back);
			if (errs)
				append(err, sizeof(err), "error bits 0x%x; ", errs);
			if (problems[0])
				append(err, sizeof(err), "%s", problems);
			if (last.pid_a != a || last.pid_b != b || last.pid_c != c)
				append(err, sizeof(err), "pids changed a=%d c=%d b=%d; ",
				       last.pid_a, last.pid_c, last.pid_b);
			if (err[0])
				say("CHECK FAIL %s", err);
			else
				say("CHECK OK seq=%llu advanced=%llu p1_queued=%d root=%d a=%d c=%d b=%d",
				    (unsigned long long)back, (unsigned long long)(back - back_at_check),
				    q / (int)sizeof(struct token), (int)root, (int)a, c, (int)b);
		}
		sleep_ms_full(TICK_MS);
	}
}
