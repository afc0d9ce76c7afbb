/* cflags: */
/* sigstate - a stopped child with a second SIGSTOP pending, and POSIX timers on every clock
 * (the state of CRIU's zdtm tests stopped01 and posix_timers, set up by our own code).
 *
 *   child   forked, in a process group of its own (so the harness's SIGSTOP/SIGCONT of the
 *           root's group never reaches it), blocked in read() on a pipe. The root stops it
 *           with SIGSTOP, waits until it is stopped, sends SIGSTOP again (left pending: a
 *           stopped task does not take it) and then writes one byte to the pipe.
 *   timers  CLOCK_REALTIME, CLOCK_MONOTONIC and CLOCK_BOOTTIME one-shots INT_MAX ms ahead
 *           (about 24.8 days), and a CLOCK_REALTIME periodic timer of 1 s, all with SIGALRM.
 *
 * Check (SIGUSR1):
 *   - no one-shot has fired, each still has more than INT_MAX ms - 1 h left and no more
 *     than it was given, and no interval; the periodic one still has its 1 s interval;
 *   - the child is still stopped (waitid WSTOPPED); once continued with SIGCONT it reads its
 *     byte and exits with status 0. The child part runs on the first check only.
 *
 * READY line:  READY pid=P child=C
 * CHECK line:  CHECK OK timers=4 child=stopped,exited0
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <limits.h>
#include <sys/wait.h>

#define ONESHOTS 3
static const clockid_t oneshot_clocks[ONESHOTS] = { CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME };
static const char *const oneshot_names[ONESHOTS] = { "realtime", "monotonic", "boottime" };
static timer_t oneshot[ONESHOTS], periodic;
static volatile sig_atomic_t alarms_oneshot, alarms_periodic;

static void on_alarm(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (si->si_code == SI_TIMER && si->si_value.sival_int == ONESHOTS)
		alarms_periodic++;
	else
		alarms_oneshot++;
}

static void make_timer(timer_t *t, clockid_t clock, int index, long long ms, long long interval_ms)
{
	struct sigevent ev;
	memset(&ev, 0, sizeof(ev));
	ev.sigev_notify = SIGEV_SIGNAL;
	ev.sigev_signo = SIGALRM;
	ev.sigev_value.sival_int = index;
	if (timer_create(clock, &ev, t) < 0)
		setup_fail("timer_create clock %d", (int)clock);
	struct itimerspec its = {
		.it_value = { ms / 1000, (ms % 1000) * 1000000L },
		.it_interval = { interval_ms / 1000, (interval_ms % 1000) * 1000000L },
	};
	if (timer_settime(*t, 0, &its, NULL) < 0)
		setup_fail("timer_settime clock %d", (int)clock);
}

static void check_timers(char *err, size_t errsz)
{
	const long long given = (long long)INT_MAX * 1000000LL, hour = 3600LL * 1000000000LL;
	struct itimerspec its;
	for (int i = 0; i < ONESHOTS; i++) {
		if (timer_gettime(oneshot[i], &its) < 0) {
			append(err, errsz, "timer_gettime %s; ", oneshot_names[i]);
			continue;
		}
		long long left = its.it_value.tv_sec * 1000000000LL + its.it_value.tv_nsec;
		if (left <= given - hour || left > given || its.it_interval.tv_sec || its.it_interval.tv_nsec)
			append(err, errsz, "%s one-shot has %lld ns left, interval %lds; ", oneshot_names[i], left,
			       (long)its.it_interval.tv_sec);
	}
	if (alarms_oneshot)
		append(err, errsz, "%d one-shot timer(s) fired; ", (int)alarms_oneshot);
	if (timer_gettime(periodic, &its) < 0 || its.it_interval.tv_sec != 1 || its.it_interval.tv_nsec)
		append(err, errsz, "periodic timer lost its 1 s interval; ");
}

static void check_child(pid_t child, char *err, size_t errsz)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, child, &si, WSTOPPED | WNOHANG | WNOWAIT) < 0 || si.si_pid != child ||
	    si.si_code != CLD_STOPPED) {
		append(err, errsz, "child %d is not stopped (si_pid %d code %d); ", (int)child, (int)si.si_pid,
		       si.si_code);
		return;
	}
	if (kill(child, SIGCONT) < 0) {
		append(err, errsz, "SIGCONT to child; ");
		return;
	}
	int status;
	pid_t w;
	/* the pending SIGSTOP was consumed by the dump (as criu's seize consumes it): the child
	 * must run on now, read its byte and exit 0 */
	while ((w = waitpid(child, &status, 0)) < 0 && errno == EINTR)
		;
	if (w != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		append(err, errsz, "child did not exit 0 after SIGCONT (status 0x%x); ", status);
}

int main(void)
{
	setsid();
	int p[2];
	if (pipe(p) < 0)
		setup_fail("pipe");
	pid_t child = fork();
	if (child < 0)
		setup_fail("fork");
	if (child == 0) {
		close(p[1]);
		char c;
		ssize_t r;
		while ((r = read(p[0], &c, 1)) < 0 && errno == EINTR)
			;
		_exit(r == 1 && c == '0' ? 0 : 1);
	}
	close(p[0]);
	if (setpgid(child, child) < 0)
		setup_fail("setpgid child");
	if (kill(child, SIGSTOP) < 0)
		setup_fail("SIGSTOP child");
	siginfo_t si;
	if (waitid(P_PID, child, &si, WSTOPPED | WNOWAIT) < 0)
		setup_fail("waitid child");
	if (kill(child, SIGSTOP) < 0) /* pending: a stopped task does not take it */
		setup_fail("second SIGSTOP");
	if (write(p[1], "0", 1) != 1)
		setup_fail("write pipe");
	close(p[1]);

	sigset_t blocked, waitmask, alrm;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	usr1_setup(&blocked, &waitmask, &alrm);
	sigdelset(&waitmask, SIGALRM);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_alarm;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		setup_fail("sigaction SIGALRM");
	for (int i = 0; i < ONESHOTS; i++)
		make_timer(&oneshot[i], oneshot_clocks[i], i, INT_MAX, 0);
	make_timer(&periodic, CLOCK_REALTIME, ONESHOTS, 1000, 1000);

	say("READY pid=%d child=%d", (int)getpid(), (int)child);

	int child_checked = 0;
	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		char err[1024] = "";
		check_timers(err, sizeof(err));
		if (!child_checked) {
			check_child(child, err, sizeof(err));
			child_checked = 1;
		}
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK timers=%d child=stopped,exited0", ONESHOTS + 1);
	}
}
