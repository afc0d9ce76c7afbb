/* cflags: */
/* counter - interval timer + signal handler state.
 *
 * setitimer(ITIMER_REAL, 1 s) drives a SIGALRM handler that increments a
 * counter; the main loop sleeps in sigsuspend() and prints "count N" whenever
 * the counter changed.  Exercises: itimers, signal handlers, pending/blocked
 * signal masks.  After a long stop, pending SIGALRMs collapse into one, so the
 * count simply resumes from its in-memory value.
 *
 * READY line:  READY pid=P interval_ms=1000
 * CHECK line:  CHECK OK count=N       (the host checks continuity of counts)
 *              CHECK FAIL itimer ...  (the 1 s ITIMER_REAL interval was lost)
 */
#include "common.h"
#include <sys/time.h>

static volatile sig_atomic_t ticks;

static void on_alarm(int sig)
{
	(void)sig;
	ticks++;
}

int main(void)
{
	setsid();

	sigset_t blocked, waitmask;
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGALRM);
	sigaddset(&blocked, SIGUSR1);
	block_set(&blocked);
	sigprocmask(SIG_BLOCK, NULL, &waitmask);
	sigdelset(&waitmask, SIGALRM);
	sigdelset(&waitmask, SIGUSR1);

	install_handler(SIGALRM, on_alarm, SA_RESTART);
	install_handler(SIGUSR1, on_usr1, 0);

	struct itimerval it = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
	if (setitimer(ITIMER_REAL, &it, NULL) < 0)
		setup_fail("setitimer");

	say("READY pid=%d interval_ms=1000", (int)getpid());

	long printed = 0;
	for (;;) {
		block_set(&blocked);	/* see block_set() comment */
		while (ticks == printed && !usr1_flag)
			sigsuspend(&waitmask);
		if (ticks != printed) {
			printed = ticks;
			say("count %ld", printed);
		}
		if (usr1_flag) {
			usr1_flag = 0;
			/* The timer itself must have survived, still 1 s periodic. */
			struct itimerval cur;
			if (getitimer(ITIMER_REAL, &cur) < 0 ||
			    cur.it_interval.tv_sec != 1 || cur.it_interval.tv_usec != 0)
				say("CHECK FAIL itimer interval=%lds%ldus count=%ld",
				    (long)cur.it_interval.tv_sec,
				    (long)cur.it_interval.tv_usec, (long)ticks);
			else
				say("CHECK OK count=%ld", (long)ticks);
		}
	}
}
