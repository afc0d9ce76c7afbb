/* cflags: */
/* sysvshm - two processes in their own IPC namespace sharing System V shared memory.
 *
 * Root R unshares its IPC namespace, creates segment A (IPC_PRIVATE, 5 pages, mode 0600)
 * and segment B (key 0x4f564d, 2 pages, mode 0640, never attached), attaches A, writes
 * pages 0-1 of A and page 0 of B (through a short-lived attachment), and forks K, which
 * inherits the attachment and writes page 3. K blocks in read() on a pipe from R.
 *
 * Check (SIGUSR1 to R): R verifies A and B through shmat/shmctl, writes a probe into A's
 * page 4 and wakes K; K verifies, answers in page 2 and reports through a pipe.
 *
 * READY line:  READY root=R child=K shmid=ID
 * CHECK line:  CHECK OK root=R child=K probes=N
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <sched.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>

#define PG 4096
#define KEY_B 0x4f564d

static unsigned char *seg;
static int shmid;

static void verify(char *err, size_t errsz, const char *who)
{
	if (!page_is(seg, "R", 0) || !page_is(seg + PG, "R", 1))
		append(err, errsz, "%s: R's pages of A wrong; ", who);
	if (!page_is(seg + 3 * PG, "K", 3))
		append(err, errsz, "%s: K's page of A wrong; ", who);
	struct shmid_ds ds;
	if (shmctl(shmid, IPC_STAT, &ds) < 0 || ds.shm_segsz != 5 * PG || (ds.shm_perm.mode & 0777) != 0600)
		append(err, errsz, "%s: segment A's size or mode changed; ", who);
	int b = shmget(KEY_B, 0, 0);
	unsigned char *bp = b < 0 ? (void *)-1 : shmat(b, NULL, SHM_RDONLY);
	if (bp == (void *)-1) {
		append(err, errsz, "%s: segment B is gone; ", who);
	} else {
		if (!page_is(bp, "B", 0))
			append(err, errsz, "%s: segment B page 0 wrong; ", who);
		shmdt(bp);
	}
}

static void child(int ctl, int report)
{
	signal(SIGUSR1, SIG_IGN);
	fill_pattern_page(seg + 3 * PG, "K", 3);
	for (int probe = 1;; probe++) {
		char c;
		ssize_t r = read(ctl, &c, 1);
		if (r < 0 && errno == EINTR) {
			probe--;
			continue;
		}
		if (r <= 0)
			_exit(0);
		char err[1024] = "";
		verify(err, sizeof(err), "child");
		if (!page_is(seg + 4 * PG, "R-probe", probe))
			append(err, sizeof(err), "child: no probe %d in page 4; ", probe);
		fill_pattern_page(seg + 2 * PG, "K-answer", probe);
		if (send_report(report, err) < 0)
			_exit(1);
	}
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	if (unshare(CLONE_NEWIPC) < 0)
		setup_fail("unshare(CLONE_NEWIPC)");
	shmid = shmget(IPC_PRIVATE, 5 * PG, IPC_CREAT | 0600);
	int b = shmget(KEY_B, 2 * PG, IPC_CREAT | IPC_EXCL | 0640);
	if (shmid < 0 || b < 0)
		setup_fail("shmget");
	seg = shmat(shmid, NULL, 0);
	unsigned char *bp = shmat(b, NULL, 0);
	if (seg == (void *)-1 || bp == (void *)-1)
		setup_fail("shmat");
	fill_pattern_page(seg, "R", 0);
	fill_pattern_page(seg + PG, "R", 1);
	fill_pattern_page(bp, "B", 0);
	shmdt(bp);

	int ctl[2], rep[2];
	if (pipe(ctl) < 0 || pipe(rep) < 0)
		setup_fail("pipe");
	pid_t k = fork();
	if (k < 0)
		setup_fail("fork");
	if (k == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		close(ctl[1]);
		close(rep[0]);
		child(ctl[0], rep[1]);
	}
	close(ctl[0]);
	close(rep[1]);
	int ready = 0;
	for (int tries = 0; tries < 500 && !ready; tries++) {
		ready = page_is(seg + 3 * PG, "K", 3);
		if (!ready)
			sleep_ms(10);
	}
	if (!ready)
		setup_fail("the child's write did not show");
	say("READY root=%d child=%d shmid=%d", (int)getpid(), (int)k, shmid);

	for (int probe = 1;; probe++) {
		wait_for_usr1(&blocked, &waitmask);
		char err[2048] = "";
		verify(err, sizeof(err), "root");
		fill_pattern_page(seg + 4 * PG, "R-probe", probe);
		if (write(ctl[1], "c", 1) != 1)
			append(err, sizeof(err), "ctl write: %s; ", strerror(errno));
		char msg[REPORT_LEN + 1];
		if (recv_report(rep[0], msg) < 0) {
			append(err, sizeof(err), "no report from the child; ");
		} else {
			if (strcmp(msg, "OK"))
				append(err, sizeof(err), "%s", msg);
			if (!page_is(seg + 2 * PG, "K-answer", probe))
				append(err, sizeof(err), "root: no answer %d in page 2; ", probe);
		}
		int st;
		if (waitpid(k, &st, WNOHANG) != 0)
			append(err, sizeof(err), "child gone; ");
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK root=%d child=%d probes=%d", (int)getpid(), (int)k, probe);
	}
}
