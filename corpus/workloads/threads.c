/* cflags: -pthread */
/* threads [N] - a multi-threaded process with per-thread state.
 *
 * N worker threads (default 4, 1..30).  Worker i loops: bump counter[i],
 * check its own per-thread state, nanosleep 50 ms.  Per-thread state:
 *   - signal mask: SIGUSR1 plus SIGRTMIN+i blocked (a different RT signal
 *     in every thread),
 *   - sigaltstack: its own malloc'ed stack of 64 KiB + i*4 KiB,
 *   - thread name "worker-i" (comm of the task).
 * A worker that sees its state changed sets bad[i] (and keeps going).
 * The main thread sleeps in sigsuspend().  On SIGUSR1 it samples all counters,
 * sleeps 1 s, samples again and reports.
 *
 * READY line:  READY threads=N pid=P
 * CHECK line:  CHECK OK threads=N advanced=N
 *              CHECK FAIL stuck=i,j bad=k:mask,... tasks=T
 */
#include "common.h"
#include <dirent.h>
#include <pthread.h>

#define MAXT 30
#define ALT_SIZE(i) (65536 + (size_t)(i) * 4096)

static int nthreads;
static unsigned long counter[MAXT];
static volatile int bad[MAXT];		/* bit 1: mask, 2: altstack, 4: name */
static void *alt[MAXT];
static int started;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static void thread_mask(int i, sigset_t *m)
{
	sigemptyset(m);
	sigaddset(m, SIGUSR1);		/* SIGUSR1 must go to the main thread */
	sigaddset(m, SIGRTMIN + i);
}

static int self_check(int i)
{
	int b = 0;
	sigset_t want, cur;
	thread_mask(i, &want);
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	for (int s = 1; s <= SIGRTMAX; s++) {
		if (s == 32 || s == 33)	/* reserved by glibc, never reported */
			continue;
		if (sigismember(&want, s) != sigismember(&cur, s))
			b |= 1;
	}
	stack_t ss;
	if (sigaltstack(NULL, &ss) < 0 || ss.ss_sp != alt[i] || ss.ss_size != ALT_SIZE(i) ||
	    ss.ss_flags != 0)
		b |= 2;
	char name[16], wname[16];
	snprintf(wname, sizeof(wname), "worker-%d", i);
	if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0 || strcmp(name, wname))
		b |= 4;
	return b;
}

static void *worker(void *arg)
{
	int i = (int)(intptr_t)arg;
	sigset_t m;
	thread_mask(i, &m);
	pthread_sigmask(SIG_SETMASK, &m, NULL);
	stack_t ss = { .ss_sp = alt[i], .ss_size = ALT_SIZE(i), .ss_flags = 0 };
	char name[16];
	snprintf(name, sizeof(name), "worker-%d", i);
	if (sigaltstack(&ss, NULL) < 0 || pthread_setname_np(pthread_self(), name) != 0)
		bad[i] |= 8;

	pthread_mutex_lock(&lock);
	started++;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);

	for (;;) {
		__atomic_add_fetch(&counter[i], 1, __ATOMIC_RELAXED);
		int b = self_check(i);
		if (b)
			bad[i] |= b;
		sleep_ms(50);	/* EINTR after restore is fine: just loop */
	}
	return NULL;
}

static int count_tasks(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	setsid();

	nthreads = argc > 1 ? atoi(argv[1]) : 4;
	if (nthreads < 1 || nthreads > MAXT || SIGRTMIN + nthreads - 1 > SIGRTMAX)
		setup_fail("thread count must be 1..%d", MAXT);

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	for (int i = 0; i < nthreads; i++) {
		pthread_t t;
		if (!(alt[i] = malloc(ALT_SIZE(i))))
			setup_fail("malloc");
		errno = pthread_create(&t, NULL, worker, (void *)(intptr_t)i);
		if (errno)
			setup_fail("pthread_create %d", i);
		pthread_detach(t);
	}
	pthread_mutex_lock(&lock);
	while (started < nthreads)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	sleep_ms_full(200);	/* let every worker run its first self-check */
	for (int i = 0; i < nthreads; i++)
		if (bad[i])
			setup_fail("worker %d state bad=%d", i, bad[i]);

	say("READY threads=%d pid=%d", nthreads, (int)getpid());

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);

		unsigned long before[MAXT];
		for (int i = 0; i < nthreads; i++)
			before[i] = __atomic_load_n(&counter[i], __ATOMIC_RELAXED);
		sleep_ms_full(1000);
		char stuck[256] = "", bads[512] = "";
		int advanced = 0;
		for (int i = 0; i < nthreads; i++) {
			if (__atomic_load_n(&counter[i], __ATOMIC_RELAXED) != before[i])
				advanced++;
			else
				append(stuck, sizeof(stuck), "%s%d", stuck[0] ? "," : "", i);
			int b = bad[i];
			if (b)
				append(bads, sizeof(bads), "%s%d:%s%s%s%s", bads[0] ? "," : "", i,
				       b & 1 ? "mask" : "", b & 2 ? "+altstack" : "",
				       b & 4 ? "+name" : "", b & 8 ? "+setup" : "");
		}
		int tasks = count_tasks();
		if (advanced == nthreads && !bads[0] && tasks == nthreads + 1)
			say("CHECK OK threads=%d advanced=%d", nthreads, advanced);
		else
			say("CHECK FAIL stuck=%s bad=%s tasks=%d", stuck[0] ? stuck : "-",
			    bads[0] ? bads : "-", tasks);
	}
}
