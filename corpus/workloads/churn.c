/* cflags: -pthread */
/* churn - processes and threads that come and go without end, as on a busy guest: a guest
 * paused at any moment may hold one half made (copy_process) or half gone (exit, release_task).
 *
 * One thread forks a child that exits at once, and waits for it; a second creates a thread
 * that exits at once, and joins it; a third forks a child that makes a thread of its own
 * before both end. Each loop counts its rounds; the main thread waits for SIGUSR1.
 *
 * READY:  READY root=PID
 * CHECK:  (on SIGUSR1) CHECK OK forks=N threads=M nested=K once every loop has gone on
 *         CHECK FAIL ... when one has stopped
 */
#include "common.h"
#include <pthread.h>
#include <sys/wait.h>

static volatile unsigned long forks, threads, nested;

static void *nothing(void *arg)
{
	return arg;
}

static void *thread_loop(void *arg)
{
	for (;;) {
		pthread_t t;
		if (pthread_create(&t, NULL, nothing, NULL) == 0 && pthread_join(t, NULL) == 0)
			threads++;
	}
	return arg;
}

static void *fork_loop(void *arg)
{
	for (;;) {
		pid_t child = fork();
		if (child == 0)
			_exit(0);
		if (child > 0 && waitpid(child, NULL, 0) == child)
			forks++;
	}
	return arg;
}

static void *nested_loop(void *arg)
{
	for (;;) {
		pid_t child = fork();
		if (child == 0) {
			pthread_t t;
			if (pthread_create(&t, NULL, nothing, NULL) == 0)
				pthread_join(t, NULL);
			_exit(0);
		}
		if (child > 0 && waitpid(child, NULL, 0) == child)
			nested++;
	}
	return arg;
}

int main(void)
{
	setsid();
	sigset_t blocked;
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGUSR1);
	block_set(&blocked);	/* the loops' threads inherit it: SIGUSR1 waits for the main thread */
	pthread_t a, b, c;
	if (pthread_create(&a, NULL, fork_loop, NULL) || pthread_create(&b, NULL, thread_loop, NULL) ||
	    pthread_create(&c, NULL, nested_loop, NULL))
		setup_fail("pthread_create");
	say("READY root=%d", (int)getpid());
	for (;;) {
		int sig;
		if (sigwait(&blocked, &sig) != 0)
			continue;
		unsigned long f = forks, t = threads, n = nested;
		sleep_ms(500);
		if (forks > f && threads > t && nested > n)
			say("CHECK OK forks=%lu threads=%lu nested=%lu", forks, threads, nested);
		else
			say("CHECK FAIL forks %lu->%lu threads %lu->%lu nested %lu->%lu", f, forks, t, threads, n,
			    nested);
	}
}
