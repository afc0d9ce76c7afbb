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
 * `pipetree box FILE` (the runc container's program): p4 is a UNIX socket pair instead of a
 * pipe, R appends "seq N" to FILE (under a bind mount) every tick, and the check also sees
 * that the host name and the mounts (/proc/self/mountinfo less ids, devices, peer groups and the
 * host devtmpfs's boot-time size) are those R saw at its start and that FILE, by its path, is the file R writes and holds
 * every line R wrote. `pipetree box FILE seccomp` (the runc-seccomp container, under a profile
 * shaped like Docker's default) also checks that R still runs under a seccomp filter that
 * makes keyctl(2), which the profile does not allow, fail with EPERM.
 *
 * READY line:  READY root=R a=A c=C b=B lag=2 interval_ms=200
 * CHECK line:  CHECK OK seq=N advanced=M p1_queued=Q root=R a=A c=C b=B
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
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

#define MOUNTS_MAX 16384

static int line_cmp(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The host's devtmpfs sizes itself from the RAM the kernel had free at boot, which differs by a
 * page or two from boot to boot: a bind of one of its nodes shows the restoring guest's size,
 * which says nothing about the restored container. Drops those two options in place. */
static void drop_boot_sizing(char *opts)
{
	char *out = opts;
	for (char *s2 = NULL, *o = strtok_r(opts, ",", &s2); o; o = strtok_r(NULL, ",", &s2)) {
		if (!strncmp(o, "size=", 5) || !strncmp(o, "nr_inodes=", 10))
			continue;
		if (out != opts)
			*out++ = ',';
		memmove(out, o, strlen(o) + 1);
		out += strlen(out);
	}
	*out = 0;
}

/* The mounts R sees, one "root point options fstype source superoptions" line each, sorted:
 * what a restore must give back (ids, devices and peer groups are new after one). */
static void mounts_now(char *out, size_t size)
{
	static char raw[MOUNTS_MAX];
	char *lines[256];
	int n = 0;
	out[0] = 0;
	int fd = open("/proc/self/mountinfo", O_RDONLY);
	ssize_t len = fd < 0 ? -1 : read(fd, raw, sizeof(raw) - 1);
	if (fd >= 0)
		close(fd);
	if (len <= 0)
		return;
	raw[len] = 0;
	for (char *save = NULL, *line = strtok_r(raw, "\n", &save); line && n < 256;
	     line = strtok_r(NULL, "\n", &save)) {
		char *f[16], *sep = strstr(line, " - ");
		int k = 0;
		if (!sep)
			continue;
		*sep = 0;
		for (char *s2 = NULL, *w = strtok_r(line, " ", &s2); w && k < 6; w = strtok_r(NULL, " ", &s2))
			f[k++] = w;
		for (char *s2 = NULL, *w = strtok_r(sep + 3, " ", &s2); w && k < 9; w = strtok_r(NULL, " ", &s2))
			f[k++] = w;
		if (k != 9)
			continue;
		static char norm[256][256];
		size_t root_len = strlen(f[3]);
		if (root_len >= 5 && !strcmp(f[3] + root_len - 5, "/null"))
			/* a masked path: a bind of a null device, whose file system (the container's
			 * /dev or the host's) is the runtime's choice, and differs after a restore */
			snprintf(norm[n], sizeof(norm[n]), "%s masked", f[4]);
		else {
			if (!strcmp(f[6], "devtmpfs"))
				drop_boot_sizing(f[8]);
			snprintf(norm[n], sizeof(norm[n]), "%s %s %s %s %s %s", f[3], f[4], f[5], f[6], f[7], f[8]);
		}
		lines[n] = norm[n];
		n++;
	}
	qsort(lines, n, sizeof(lines[0]), line_cmp);
	for (int i = 0; i < n; i++)
		append(out, size, "%s\n", lines[i]);
}

struct box {
	const char *path;
	int fd;
	off_t written;
	char host[65];
	char mounts[MOUNTS_MAX];
};

static void box_start(struct box *box, const char *path)
{
	struct utsname u;
	box->path = path;
	box->written = 0;
	box->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (box->fd < 0 || uname(&u) < 0)
		setup_fail("box %s: %s", path, strerror(errno));
	snprintf(box->host, sizeof(box->host), "%s", u.nodename);
	mounts_now(box->mounts, sizeof(box->mounts));
	if (!box->mounts[0])
		setup_fail("box: no mounts read");
}

static void box_tick(struct box *box, uint64_t seq, char *problems, size_t size)
{
	char line[32];
	int len = snprintf(line, sizeof(line), "seq %llu\n", (unsigned long long)seq);
	if (write_full(box->fd, line, (size_t)len) < 0) {
		if (!problems[0])
			append(problems, size, "write %s: %s; ", box->path, strerror(errno));
		return;
	}
	box->written += len;
}

/* Is the caller under the container's seccomp profile: /proc/self/status says filter mode, and
 * keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING), which works unconfined, is EPERM. */
static void seccomp_check(char *err, size_t size)
{
	char status[4096] = "";
	int fd = open("/proc/self/status", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, status, sizeof(status) - 1);
	if (fd >= 0)
		close(fd);
	if (n <= 0 || !strstr(status, "\nSeccomp:\t2\n"))
		append(err, size, "not under a seccomp filter; ");
	errno = 0;
	long r = syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* KEY_SPEC_SESSION_KEYRING */, 0);
	if (r != -1 || errno != EPERM)
		append(err, size, "keyctl returned %ld (errno %d), want EPERM from the profile; ", r, errno);
}

static void box_check(struct box *box, char *err, size_t size)
{
	static char now[MOUNTS_MAX];
	struct utsname u;
	struct stat held, named;
	if (uname(&u) < 0 || strcmp(u.nodename, box->host))
		append(err, size, "host name %s, was %s; ", u.nodename, box->host);
	mounts_now(now, sizeof(now));
	if (strcmp(now, box->mounts)) {
		char *was = strdup(box->mounts), *is = strdup(now);
		for (char *s2 = NULL, *l = strtok_r(was, "\n", &s2); l; l = strtok_r(NULL, "\n", &s2))
			if (!strstr(now, l))
				append(err, size, "mount gone or changed: %s; ", l);
		for (char *s2 = NULL, *l = strtok_r(is, "\n", &s2); l; l = strtok_r(NULL, "\n", &s2))
			if (!strstr(box->mounts, l))
				append(err, size, "mount new or changed: %s; ", l);
		free(was);
		free(is);
	}
	if (fstat(box->fd, &held) < 0 || stat(box->path, &named) < 0)
		append(err, size, "stat %s: %s; ", box->path, strerror(errno));
	else if (held.st_ino != named.st_ino || held.st_dev != named.st_dev)
		append(err, size, "%s is not the file written; ", box->path);
	else if (held.st_size != box->written)
		append(err, size, "%s holds %lld bytes, %lld written; ", box->path,
		       (long long)held.st_size, (long long)box->written);
}

static void stage_b(void)
{
	child_signals();
	keep_only(p[2][0], p[3][1]);
	relay("B", p[2][0], p[3][1], 4, 'b');
}

int main(int argc, char **argv)
{
	setsid();
	pid_t root = getpid();
	struct box box = { .fd = -1 };
	int boxed = (argc == 3 || argc == 4) && !strcmp(argv[1], "box");
	int confined = boxed && argc == 4 && !strcmp(argv[3], "seccomp");

	install_handler(SIGUSR1, on_usr1, SA_RESTART);
	signal(SIGPIPE, SIG_IGN);	/* a dead child shows up as EPIPE, not our death */

	for (int i = 0; i < 4; i++)
		if (boxed && i == 3 ? socketpair(AF_UNIX, SOCK_STREAM, 0, p[i]) < 0 : pipe(p[i]) < 0)
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
	if (boxed)
		box_start(&box, argv[2]);	/* R's alone: after the forks */
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
		if (w == (ssize_t)sizeof(t)) {
			if (boxed)
				box_tick(&box, next, problems, sizeof(problems));
			next++;
		} else if (!problems[0])
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
			char err[2048] = "";
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
			if (boxed)
				box_check(&box, err, sizeof(err));
			if (confined)
				seccomp_check(err, sizeof(err));
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
