/* cflags: */
/* container [uts|unsaved] - a PID namespace init plus one child, inside cgroup /ovmbox.
 *
 * uts:     the init also has a UTS namespace of its own, with host name ovmbox and domain
 *          name ovm.example set before READY; both processes check uname(2) after restore.
 * unsaved: as uts, plus mount and network namespaces of the init's own, and K unshares a
 *          time namespace (for children it never forks) and a user namespace with a UTS
 *          namespace of its own: namespaces a dump must refuse by name (criu cannot dump
 *          the nested ones either, so this mode has no golden images).
 *
 * Launcher L (setsid):  mkdir <cgroot>/ovmbox (EEXIST ok), move itself there,
 *   unshare(CLONE_NEWPID), fork the namespace init I, wait for I to report
 *   (over a pipe) that it is set up, print READY with I's outer pid, EXIT.
 *   L is therefore not part of the checkpointed tree; I is reparented.
 * Init I (pid 1 inside, setsid again so it leads its own session/group):
 *   forks K (pid 2 inside), runs a 1 s ITIMER_REAL counter like `counter`
 *   (silently: no per-tick lines) and sleeps in sigsuspend().
 * Child K: blocks in read() on a request pipe; for each request byte it
 *   answers with its inner pid and whether /proc/self/cgroup says /ovmbox.
 *
 * The harness STOPs/CONTs the group of, and sends SIGUSR1 to, I's outer pid
 * (outer_pid in READY; after a CRIU restore the outer pid may differ, the
 * CHECK line reports the current one).  <cgroot> is $OVM_CGROUP_ROOT,
 * default /sys/fs/cgroup (cgroup2 mounted by the guest init).
 *
 * READY line:  READY outer_pid=X child_outer_pid=Y inner_pid=1 child_inner_pid=2 cgroup=/ovmbox
 * CHECK line:  CHECK OK count=N advanced=D inner_pid=1 child_inner_pid=2 cgroup=/ovmbox outer_pid=X
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#define CGNAME "ovmbox"
#define HOSTNAME "ovmbox"
#define DOMAINNAME "ovm.example"

static const char *mode = "";
static int own_uts(void) { return strcmp(mode, "uts") == 0 || strcmp(mode, "unsaved") == 0; }

static volatile sig_atomic_t ticks;
static void on_alarm(int sig) { (void)sig; ticks++; }

struct reply { int32_t pid; int32_t cgroup_ok; int32_t outer_pid; int32_t uts_ok; };

/* 1 if uname(2) reports the names the init set (or, without a UTS namespace of our own, any). */
static int uts_names_ok(void)
{
	struct utsname u;
	if (!own_uts())
		return 1;
	return uname(&u) == 0 && strcmp(u.nodename, HOSTNAME) == 0 && strcmp(u.domainname, DOMAINNAME) == 0;
}

/* 1 if the unified-hierarchy line of /proc/self/cgroup is "0::/ovmbox". */
static int in_cgroup(void)
{
	char buf[4096];
	int fd = open("/proc/self/cgroup", O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
		if (strcmp(l, "0::/" CGNAME) == 0)
			return 1;
	return 0;
}

/* Our pid as seen by the guest's /proc (the outer namespace). */
static int outer_pid(void)
{
	char b[32];
	ssize_t n = readlink("/proc/self", b, sizeof(b) - 1);
	if (n <= 0)
		return -1;
	b[n] = 0;
	return atoi(b);
}

static void child_k(int req_fd, int rep_fd)
{
	signal(SIGUSR1, SIG_IGN);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (strcmp(mode, "unsaved") == 0) {
		/* EINVAL: a kernel without time namespaces; the dump then has one refusal less */
		if (unshare(CLONE_NEWTIME) < 0 && errno != EINVAL)
			_exit(3);
		if (unshare(CLONE_NEWUSER | CLONE_NEWUTS) < 0)
			_exit(4);
	}
	char c;
	for (;;) {
		ssize_t r = read(req_fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			_exit(0);
		struct reply rep = { getpid(), in_cgroup(), outer_pid(), uts_names_ok() };
		if (write_full(rep_fd, &rep, sizeof(rep)) < 0)
			_exit(1);
	}
}

/* Ask K for its state; -1 on timeout (~2 s) or broken pipe. */
static int ask_k(int req_fd, int rep_fd, struct reply *rep)
{
	if (write_full(req_fd, "?", 1) < 0)
		return -1;
	struct pollfd p = { .fd = rep_fd, .events = POLLIN };
	int r;
	while ((r = poll(&p, 1, 2000)) < 0 && errno == EINTR)
		;
	if (r <= 0)
		return -1;
	return read_full(rep_fd, rep, sizeof(*rep));
}

static void ns_init(int ready_fd)
{
	setsid();	/* own session and process group, sid = pgid = 1 inside */

	sigset_t blocked, waitmask;
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGALRM);
	sigaddset(&blocked, SIGUSR1);
	block_set(&blocked);
	sigprocmask(SIG_BLOCK, NULL, &waitmask);
	sigdelset(&waitmask, SIGALRM);
	sigdelset(&waitmask, SIGUSR1);
	/* A namespace init only receives signals it has handlers for. */
	install_handler(SIGALRM, on_alarm, SA_RESTART);
	install_handler(SIGUSR1, on_usr1, 0);

	if (own_uts() && (sethostname(HOSTNAME, strlen(HOSTNAME)) < 0 ||
			  setdomainname(DOMAINNAME, strlen(DOMAINNAME)) < 0))
		setup_fail("setting the host and domain names");

	int req[2], rep[2];
	if (pipe(req) < 0 || pipe(rep) < 0)
		setup_fail("pipe");
	pid_t k = fork();
	if (k < 0)
		setup_fail("fork K");
	if (k == 0) {
		close(ready_fd);
		close(req[1]);
		close(rep[0]);
		child_k(req[0], rep[1]);
	}
	close(req[0]);
	close(rep[1]);

	struct reply r;
	if (getpid() != 1)
		setup_fail("init has inner pid %d", (int)getpid());
	if (ask_k(req[1], rep[0], &r) < 0 || r.pid != 2 || !r.cgroup_ok || !r.uts_ok)
		setup_fail("child K: pid=%d cgroup_ok=%d uts_ok=%d", r.pid, r.cgroup_ok, r.uts_ok);
	if (!in_cgroup())
		setup_fail("init not in cgroup /%s", CGNAME);

	struct itimerval it = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
	if (setitimer(ITIMER_REAL, &it, NULL) < 0)
		setup_fail("setitimer");

	char msg[64];
	int n = snprintf(msg, sizeof(msg), "OK %d\n", r.outer_pid);
	write_full(ready_fd, msg, (size_t)n);
	close(ready_fd);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);

		char err[1024] = "";
		if (getpid() != 1)
			append(err, sizeof(err), "inner pid=%d; ", (int)getpid());
		if (getsid(0) != 1 || getpgrp() != 1)
			append(err, sizeof(err), "sid=%d pgrp=%d; ", (int)getsid(0), (int)getpgrp());
		if (!in_cgroup())
			append(err, sizeof(err), "init not in /%s; ", CGNAME);
		int st;
		pid_t w = waitpid(k, &st, WNOHANG);
		if (w != 0)
			append(err, sizeof(err), "child K gone (waitpid=%d status=0x%x); ", (int)w, st);
		else if (ask_k(req[1], rep[0], &r) < 0)
			append(err, sizeof(err), "child K does not answer; ");
		else if (r.pid != 2 || !r.cgroup_ok || !r.uts_ok)
			append(err, sizeof(err), "child K pid=%d cgroup_ok=%d uts_ok=%d; ", r.pid, r.cgroup_ok, r.uts_ok);
		if (!uts_names_ok())
			append(err, sizeof(err), "init's uname is not %s/%s; ", HOSTNAME, DOMAINNAME);
		/* The interval timer must still be ticking (relative sleep only;
		 * SIGALRM is unblocked for the duration). */
		sigset_t alrm;
		sigemptyset(&alrm);
		sigaddset(&alrm, SIGALRM);
		long before = ticks;
		sigprocmask(SIG_UNBLOCK, &alrm, NULL);
		sleep_ms_full(2500);
		sigprocmask(SIG_BLOCK, &alrm, NULL);
		long after = ticks;
		if (after <= before)
			append(err, sizeof(err), "counter stuck at %ld; ", after);
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK count=%ld advanced=%ld inner_pid=1 child_inner_pid=2 cgroup=/%s outer_pid=%d",
			    after, after - before, CGNAME, outer_pid());
	}
}

int main(int argc, char **argv)
{
	setsid();
	if (argc > 1)
		mode = argv[1];
	if (*mode && !own_uts())
		setup_fail("unknown mode %s", mode);

	const char *cgroot = getenv("OVM_CGROUP_ROOT");
	if (!cgroot || !*cgroot)
		cgroot = "/sys/fs/cgroup";
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", cgroot, CGNAME);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		setup_fail("mkdir %s", path);
	snprintf(path, sizeof(path), "%s/%s/cgroup.procs", cgroot, CGNAME);
	int fd = open(path, O_WRONLY);
	char pidbuf[32];
	int n = snprintf(pidbuf, sizeof(pidbuf), "%d\n", (int)getpid());
	if (fd < 0 || write(fd, pidbuf, (size_t)n) != n)
		setup_fail("join %s", path);
	close(fd);
	if (!in_cgroup())
		setup_fail("launcher not in /%s after joining", CGNAME);

	int flags = CLONE_NEWPID;
	if (own_uts())
		flags |= CLONE_NEWUTS;
	if (strcmp(mode, "unsaved") == 0)
		flags |= CLONE_NEWNS | CLONE_NEWNET;
	if (unshare(flags) < 0)
		setup_fail("unshare(0x%x)", flags);
	int ready[2];
	if (pipe(ready) < 0)
		setup_fail("pipe");
	pid_t init = fork();
	if (init < 0)
		setup_fail("fork init");
	if (init == 0) {
		close(ready[0]);
		ns_init(ready[1]);
	}
	close(ready[1]);

	/* Wait for "OK <child outer pid>" (EOF means the init failed; it has
	 * already printed its own SETUP FAIL line). */
	char buf[64] = "";
	ssize_t got = 0, r;
	while (got < (ssize_t)sizeof(buf) - 1 &&
	       (r = read(ready[0], buf + got, sizeof(buf) - 1 - got)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		got += r;
		if (memchr(buf, '\n', (size_t)got))
			break;
	}
	int kouter = 0;
	if (sscanf(buf, "OK %d", &kouter) != 1) {
		kill(init, SIGKILL);
		errno = 0;
		setup_fail("namespace init did not come up");
	}
	say("READY outer_pid=%d child_outer_pid=%d inner_pid=1 child_inner_pid=2 cgroup=/%s uts=%s",
	    (int)init, kouter, CGNAME, own_uts() ? HOSTNAME : "-");
	return 0;	/* leave: the init is reparented and becomes the tree root */
}
