/* cflags: -pthread */
/* sigpending - signals queued and not yet taken, each with its siginfo (the state of CRIU's zdtm
 * test sigpending, set up by our own code). Every signal below stays blocked in both threads
 * until the check takes it with sigtimedwait().
 *
 *   shared   SIGRTMAX queued twice to the process (rt_sigqueueinfo), values 0x1101, 0x1102
 *   main     SIGRTMIN queued to the main thread (rt_tgsigqueueinfo), value 0x2101
 *   worker   SIGRTMIN queued twice to the second thread, values 0x3101, 0x3102
 *   child    a child that exits with status 5: SIGCHLD pending, the child a zombie
 *
 * Check (SIGUSR1): the main thread takes SIGRTMAX twice in order, then its own SIGRTMIN, then
 * SIGCHLD, each with the code, sender and value it was sent with (SIGCHLD: the
 * child's PID, CLD_EXITED, status 5), and reaps the child with status 5; the worker takes its
 * two in order. Nothing else is pending afterwards. (A standard signal sent with tgkill comes back
 * from criu's restore, of criu's own images too, with si_code SI_USER, not SI_TKILL: left out.) Then all is queued again (a new child), so
 * a later check finds the same state.
 *
 * READY line:  READY pid=P worker=T child=C
 * CHECK line:  CHECK OK shared=2 main=2 worker=2 child=5
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static pid_t pid, worker_tid, child;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn = PTHREAD_COND_INITIALIZER;
static int worker_go, worker_done;
static char worker_err[512];

static void queue_to(pid_t tid, int sig, int value, int shared)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = pid;
	si.si_uid = getuid();
	si.si_value.sival_int = value;
	long r = shared ? syscall(SYS_rt_sigqueueinfo, pid, sig, &si) : syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si);
	if (r < 0)
		setup_fail("queue signal %d to %d", sig, (int)tid);
}

/* Take signal `sig` now (it must be pending) and compare its siginfo. */
static void take(int sig, int code, pid_t from, int value, const char *what, char *err, size_t errsz)
{
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	siginfo_t si;
	struct timespec now = { 0, 0 };
	if (sigtimedwait(&one, &si, &now) != sig) {
		append(err, errsz, "%s: signal %d not pending; ", what, sig);
		return;
	}
	if (si.si_code != code || si.si_pid != from || (value >= 0 && si.si_value.sival_int != value))
		append(err, errsz, "%s: code %d pid %d value 0x%x; ", what, si.si_code, (int)si.si_pid, si.si_value.sival_int);
	if (sig == SIGCHLD && si.si_status != 5)
		append(err, errsz, "%s: status %d; ", what, si.si_status);
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	worker_tid = (pid_t)syscall(SYS_gettid);
	pthread_cond_broadcast(&turn);
	for (;;) {
		while (!worker_go)
			pthread_cond_wait(&turn, &lock);
		worker_go = 0;
		worker_err[0] = 0;
		take(SIGRTMIN, SI_QUEUE, pid, 0x3101, "worker 1st", worker_err, sizeof(worker_err));
		take(SIGRTMIN, SI_QUEUE, pid, 0x3102, "worker 2nd", worker_err, sizeof(worker_err));
		sigset_t left;
		if (sigpending(&left) == 0 && sigismember(&left, SIGRTMIN))
			append(worker_err, sizeof(worker_err), "worker: SIGRTMIN still pending; ");
		worker_done = 1;
		pthread_cond_broadcast(&turn);
	}
	return NULL;
}

static void queue_all(void)
{
	queue_to(pid, SIGRTMAX, 0x1101, 1);
	queue_to(pid, SIGRTMAX, 0x1102, 1);
	queue_to(pid, SIGRTMIN, 0x2101, 0);
	queue_to(worker_tid, SIGRTMIN, 0x3101, 0);
	queue_to(worker_tid, SIGRTMIN, 0x3102, 0);
	child = fork();
	if (child < 0)
		setup_fail("fork");
	if (child == 0)
		_exit(5);
	/* its SIGCHLD is queued once it has exited: wait for that, without reaping it */
	siginfo_t si;
	if (waitid(P_PID, child, &si, WEXITED | WNOWAIT) < 0)
		setup_fail("waitid");
}

static void check(char *err, size_t errsz)
{
	take(SIGRTMAX, SI_QUEUE, pid, 0x1101, "shared 1st", err, errsz);
	take(SIGRTMAX, SI_QUEUE, pid, 0x1102, "shared 2nd", err, errsz);
	take(SIGRTMIN, SI_QUEUE, pid, 0x2101, "main", err, errsz);
	take(SIGCHLD, CLD_EXITED, child, -1, "SIGCHLD", err, errsz);
	int status;
	if (waitpid(child, &status, WNOHANG) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 5)
		append(err, errsz, "child %d not reaped with status 5; ", (int)child);
	pthread_mutex_lock(&lock);
	worker_go = 1;
	worker_done = 0;
	pthread_cond_broadcast(&turn);
	while (!worker_done)
		pthread_cond_wait(&turn, &lock);
	append(err, errsz, "%s", worker_err);
	pthread_mutex_unlock(&lock);
	sigset_t left;
	if (sigpending(&left) == 0)
		for (int s = 1; s < NSIG; s++)
			if (s != SIGUSR1 && sigismember(&left, s))
				append(err, errsz, "signal %d still pending; ", s);
	queue_all();
}

int main(void)
{
	setsid();
	pid = getpid();
	sigset_t all;
	sigfillset(&all);
	sigdelset(&all, SIGUSR1);
	sigdelset(&all, SIGKILL);
	sigdelset(&all, SIGSTOP);
	sigdelset(&all, SIGCONT);
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, &all);
	pthread_t t;
	pthread_mutex_lock(&lock);
	if (pthread_create(&t, NULL, worker, NULL) != 0) /* inherits the mask: everything blocked */
		setup_fail("pthread_create");
	while (!worker_tid)
		pthread_cond_wait(&turn, &lock);
	pthread_mutex_unlock(&lock);
	queue_all();
	say("READY pid=%d worker=%d child=%d", (int)pid, (int)worker_tid, (int)child);
	serve_checks(&blocked, &waitmask, check, "CHECK OK shared=2 main=2 worker=2 child=5");
}
