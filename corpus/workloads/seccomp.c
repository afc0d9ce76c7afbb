/* cflags: -pthread */
/* seccomp - seccomp filters on a process tree (the state of CRIU's zdtm seccomp_filter tests,
 * set up by our own code). Each filter makes one harmless call fail with an errno of its own,
 * so a check tells exactly which filters a thread runs under:
 *
 *   A  chroot -> ENOMSG (42)       installed by the root (no_new_privs set first)
 *   B  sethostname -> EIDRM (43)   installed by the child's main thread only, with
 *                                  SECCOMP_FILTER_FLAG_LOG, after its worker thread started
 *
 *   root         one thread under A (criu saves it with TSYNC)
 *   child main   under A then B
 *   child worker under A only (its chain differs from its leader's: saved per thread)
 *
 * Unfiltered, chroot("/nonexistent") fails with ENOENT and sethostname(NULL, -1) with EINVAL.
 *
 * Check (SIGUSR1 to the root): each of the three threads makes both calls and compares the
 * errnos with what its filters say; the child's two threads report over pipes.
 *
 * READY line:  READY pid=P child=C
 * CHECK line:  CHECK OK threads=3
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static void install(int nr, int err, unsigned int flags)
{
	struct sock_filter insns[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned int)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned int)err),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(insns) / sizeof(insns[0]), .filter = insns };
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) < 0)
		setup_fail("seccomp filter for call %d", nr);
}

/* The errnos of the two probe calls in the calling thread. */
static void probe(int *chroot_errno, int *hostname_errno)
{
	errno = 0;
	*chroot_errno = syscall(SYS_chroot, "/nonexistent-ovm") < 0 ? errno : 0;
	errno = 0;
	*hostname_errno = syscall(SYS_sethostname, NULL, (size_t)-1) < 0 ? errno : 0;
}

static void expect(char *err, size_t errsz, const char *who, int want_chroot, int want_hostname)
{
	int c, h;
	probe(&c, &h);
	if (c != want_chroot || h != want_hostname)
		append(err, errsz, "%s: chroot errno %d (want %d), sethostname errno %d (want %d); ", who, c,
		       want_chroot, h, want_hostname);
}

static int worker_req[2], worker_rep[2];

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		char c;
		if (read_full(worker_req[0], &c, 1) < 0)
			continue;
		char err[REPORT_LEN] = "";
		expect(err, sizeof(err), "child worker", ENOMSG, EINVAL);
		send_report(worker_rep[1], err);
	}
	return NULL;
}

static void child_main(int req, int rep)
{
	if (pipe(worker_req) < 0 || pipe(worker_rep) < 0)
		setup_fail("child pipes");
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL))
		setup_fail("pthread_create");
	install(SYS_sethostname, EIDRM, SECCOMP_FILTER_FLAG_LOG);
	char ok = 1;
	if (write(rep, &ok, 1) != 1)
		_exit(1);
	for (;;) {
		char c;
		if (read_full(req, &c, 1) < 0)
			continue;
		char err[REPORT_LEN] = "", verdict[REPORT_LEN + 1];
		expect(err, sizeof(err), "child main", ENOMSG, EIDRM);
		if (write(worker_req[1], "c", 1) != 1 || recv_report(worker_rep[0], verdict) < 0)
			append(err, sizeof(err), "no verdict from the child's worker; ");
		else if (strcmp(verdict, "OK"))
			append(err, sizeof(err), "%s", verdict);
		send_report(rep, err);
	}
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		setup_fail("PR_SET_NO_NEW_PRIVS");
	install(SYS_chroot, ENOMSG, 0);

	int req[2], rep[2];
	if (pipe(req) < 0 || pipe(rep) < 0)
		setup_fail("pipes");
	pid_t child = fork();
	if (child < 0)
		setup_fail("fork");
	if (child == 0) {
		close(req[1]);
		close(rep[0]);
		child_main(req[0], rep[1]);
	}
	close(req[0]);
	close(rep[1]);
	char ok;
	if (read_full(rep[0], &ok, 1) < 0)
		setup_fail("the child's set-up failed");

	say("READY pid=%d child=%d", (int)getpid(), (int)child);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		char err[1024] = "", verdict[REPORT_LEN + 1];
		expect(err, sizeof(err), "root", ENOMSG, EINVAL);
		if (write(req[1], "c", 1) != 1 || recv_report(rep[0], verdict) < 0)
			append(err, sizeof(err), "no verdict from the child; ");
		else if (strcmp(verdict, "OK"))
			append(err, sizeof(err), "%s", verdict);
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK threads=3");
	}
}
