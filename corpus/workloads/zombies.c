/* cflags: */
/* zombies - children that have ended and that their parent has not waited for yet (the state of
 * CRIU's zdtm tests zombie00 and zombie01, set up by our own code):
 *
 *   exited   ended with _exit(7)
 *   killed   ended by SIGTERM, which the root sent it
 *   leader   the leader of a process group of its own, ended with _exit(0)
 *
 * The root waits with waitid(WEXITED | WNOWAIT) until all three have ended, so none is reaped.
 *
 * Check (SIGUSR1): the first check reaps each one by pid and wants its own status (exit 7,
 * SIGTERM, exit 0), then no other child; a later check only says the zombies were reaped.
 *
 * READY line:  READY pid=P exited=E killed=K leader=L
 * CHECK line:  CHECK OK zombies=3
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <sys/wait.h>

static pid_t start(int how)
{
	pid_t pid = fork();
	if (pid < 0)
		setup_fail("fork");
	if (pid == 0) {
		if (how == 2)
			setpgid(0, 0);
		if (how == 1)
			for (;;)
				pause();
		_exit(how == 0 ? 7 : 0);
	}
	return pid;
}

static void reap(pid_t pid, const char *name, int want_exit, int want_signal, char *err, size_t errsz)
{
	int status;
	pid_t w;
	while ((w = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR)
		;
	if (w != pid) {
		append(err, errsz, "%s (%d) is not a zombie to reap (waitpid %d, errno %d); ", name, (int)pid, (int)w,
		       errno);
		return;
	}
	if (want_signal ? !(WIFSIGNALED(status) && WTERMSIG(status) == want_signal)
			: !(WIFEXITED(status) && WEXITSTATUS(status) == want_exit))
		append(err, errsz, "%s ended with status 0x%x; ", name, status);
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	pid_t exited = start(0), killed = start(1), leader = start(2);
	if (kill(killed, SIGTERM) < 0)
		setup_fail("SIGTERM");
	pid_t all[] = { exited, killed, leader };
	for (int i = 0; i < 3; i++) {
		siginfo_t si;
		while (waitid(P_PID, (id_t)all[i], &si, WEXITED | WNOWAIT) < 0)
			if (errno != EINTR)
				setup_fail("waitid %d", (int)all[i]);
	}
	say("READY pid=%d exited=%d killed=%d leader=%d", (int)getpid(), (int)exited, (int)killed, (int)leader);

	int reaped = 0;
	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		if (reaped) {
			say("CHECK OK zombies=3 (reaped at the first check)");
			continue;
		}
		char err[1024] = "";
		reap(exited, "exited", 7, 0, err, sizeof(err));
		reap(killed, "killed", 0, SIGTERM, err, sizeof(err));
		reap(leader, "leader", 0, 0, err, sizeof(err));
		if (waitpid(-1, NULL, WNOHANG) != -1 || errno != ECHILD)
			append(err, sizeof(err), "another child is left; ");
		reaped = 1;
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK zombies=3");
	}
}
