/* common.h - helpers shared by the ovm-offline guest workloads.
 *
 * Everything here is static inline so that unused helpers do not trigger
 * -Wunused-function under -Wall -Wextra.  Include this header FIRST in every
 * workload: it defines _GNU_SOURCE before any libc header is pulled in.
 */
#ifndef OVM_WORKLOAD_COMMON_H
#define OVM_WORKLOAD_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Base directory for files the workloads create (a tmpfs in the guest).
 * Overridable through OVM_RUN_DIR for host-side testing. */
static inline const char *run_dir(void)
{
	const char *d = getenv("OVM_RUN_DIR");
	return (d && *d) ? d : "/run/ovm";
}

/* Print one whole line with a single write(2): stdout is a regular file
 * (opened O_APPEND by the init shell) shared by several processes, and
 * nothing may sit in a stdio buffer at checkpoint time. */
static inline void __attribute__((format(printf, 1, 2))) say(const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = write(STDOUT_FILENO, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		off += (int)w;
	}
}

/* Setup failed: say so loudly and never print READY. */
static inline void __attribute__((noreturn, format(printf, 1, 2)))
setup_fail(const char *fmt, ...)
{
	int e = errno;
	char m[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	say("SETUP FAIL %s (errno=%d %s)", m, e, strerror(e));
	exit(1);
}

/* Append "text" to a fixed-size report buffer (used to build CHECK lines). */
static inline void __attribute__((format(printf, 3, 4)))
append(char *buf, size_t size, const char *fmt, ...)
{
	size_t len = strlen(buf);
	if (len + 1 >= size)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + len, size - len, fmt, ap);
	va_end(ap);
}

/* SIGUSR1 only sets a flag; the check runs in the main loop. */
static volatile sig_atomic_t usr1_flag;

static inline void on_usr1(int sig)
{
	(void)sig;
	usr1_flag = 1;
}

/* Install a handler.  No SA_RESTART unless asked: we want blocking calls in
 * the main loop to return EINTR so the loop notices the flag. */
static inline void install_handler(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) < 0)
		setup_fail("sigaction(%d)", sig);
}

/* Block the given signal set in the calling thread.  The main loops call this
 * at the top of EVERY iteration, not only once: after a CRIU restore of a task
 * that was sitting in sigsuspend(), the restored "blocked" mask is the
 * temporary sigsuspend mask, so the original mask must be re-established
 * explicitly to keep the flag-test/sigsuspend sequence race-free. */
static inline void block_set(const sigset_t *set)
{
	sigprocmask(SIG_BLOCK, set, NULL);
}

/* The signal set-up every main loop shares: block SIGUSR1 (and the signals in `also`, if
 * not NULL) in `blocked`, give `waitmask` the mask to sigsuspend() in (the same without
 * SIGUSR1), and install the flag-setting SIGUSR1 handler. */
static inline void usr1_setup(sigset_t *blocked, sigset_t *waitmask, const sigset_t *also)
{
	if (also)
		*blocked = *also;
	else
		sigemptyset(blocked);
	sigaddset(blocked, SIGUSR1);
	block_set(blocked);
	sigprocmask(SIG_BLOCK, NULL, waitmask);
	sigdelset(waitmask, SIGUSR1);
	install_handler(SIGUSR1, on_usr1, 0);
}

/* Wait for SIGUSR1 in the main loop, race-free: `blocked` re-established first (see
 * block_set), then sigsuspend() in `waitmask` until the handler has set the flag, cleared. */
static inline void wait_for_usr1(const sigset_t *blocked, const sigset_t *waitmask)
{
	block_set(blocked);
	while (!usr1_flag)
		sigsuspend(waitmask);
	usr1_flag = 0;
}

/* The main loop of a workload whose check fills `err`: on each SIGUSR1, "CHECK FAIL <err>"
 * or the line `ok`. */
static inline void __attribute__((noreturn))
serve_checks(const sigset_t *blocked, const sigset_t *waitmask, void (*check)(char *err, size_t errsz), const char *ok)
{
	for (;;) {
		wait_for_usr1(blocked, waitmask);
		char err[1024] = "";
		check(err, sizeof(err));
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("%s", ok);
	}
}

/* Append "<which> gave [<got>], wanted [<wanted>]; " to a CHECK report when the two differ. */
static inline void expect_text(char *err, size_t errsz, const char *which, const char *got, const char *wanted)
{
	if (strcmp(got, wanted))
		append(err, errsz, "%s gave [%s], wanted [%s]; ", which, got, wanted);
}

/* mkdir -p style for one level below run_dir(); returns a static path. */
static inline const char *work_dir(const char *name)
{
	static char path[4096];
	if (mkdir(run_dir(), 0755) < 0 && errno != EEXIST)
		setup_fail("mkdir %s", run_dir());
	snprintf(path, sizeof(path), "%s/%s", run_dir(), name);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		setup_fail("mkdir %s", path);
	return path;
}

/* Sleep the full duration even if signals interrupt us (relative time only;
 * nothing depends on wall-clock continuity across the migration).
 * rem is zeroed before every call: a task checkpointed inside nanosleep() is
 * restored by CRIU with the syscall simply returning EINTR, without the
 * kernel having written rem; a stale/garbage rem could then sleep forever. */
static inline void sleep_ms_full(long ms)
{
	struct timespec req = { ms / 1000, (ms % 1000) * 1000000L }, rem;
	for (;;) {
		rem.tv_sec = 0;
		rem.tv_nsec = 0;
		if (nanosleep(&req, &rem) == 0 || errno != EINTR)
			return;
		if (rem.tv_sec == 0 && rem.tv_nsec == 0)
			return;
		req = rem;
	}
}

/* Sleep once; returns early (EINTR) if a signal handler ran. */
static inline void sleep_ms(long ms)
{
	struct timespec req = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&req, NULL);
}

/* Robust full read/write on blocking fds. */
static inline int read_full(int fd, void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t r = read(fd, (char *)buf + off, len - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

static inline int write_full(int fd, const void *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, (const char *)buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

/* splitmix64 finaliser: cheap, good enough to make patterns unique. */
static inline uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/* A seed that differs between runs (no wall-clock dependency later on). */
static inline uint64_t fresh_seed(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t s = mix64(((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
			   ((uint64_t)getpid() << 16));
	return s ? s : 1;
}

/* A recognisable 4 KiB page: "<tag> page <n> offset <i>" every 64 bytes. */
#define PATTERN_PAGE 4096
static inline void fill_pattern_page(unsigned char *page, const char *tag, int n)
{
	for (int i = 0; i < PATTERN_PAGE; i += 64)
		snprintf((char *)page + i, 64, "%s page %d offset %d", tag, n, i);
}

/* Does `page` hold exactly what fill_pattern_page(tag, n) writes (zeros between the strings)? */
static inline int page_is(const unsigned char *page, const char *tag, int n)
{
	unsigned char want[PATTERN_PAGE];
	memset(want, 0, sizeof(want));
	fill_pattern_page(want, tag, n);
	return memcmp(page, want, PATTERN_PAGE) == 0;
}

/* A child's verdict over a pipe: always REPORT_LEN bytes, "OK" or what failed, blank-padded. */
#define REPORT_LEN 1024
static inline int send_report(int fd, const char *err)
{
	char msg[REPORT_LEN];
	const char *text = err[0] ? err : "OK";
	size_t len = strlen(text) < REPORT_LEN ? strlen(text) : REPORT_LEN;
	memset(msg, ' ', sizeof(msg));
	memcpy(msg, text, len);
	return write_full(fd, msg, sizeof(msg));
}

/* Read a send_report() verdict into `out` (REPORT_LEN + 1 bytes), blanks stripped. */
static inline int recv_report(int fd, char *out)
{
	if (read_full(fd, out, REPORT_LEN) < 0)
		return -1;
	out[REPORT_LEN] = 0;
	for (int i = REPORT_LEN - 1; i >= 0 && out[i] == ' '; i--)
		out[i] = 0;
	return 0;
}

#endif
