/* cflags: */
/* ghosts - files with no name left, held by fds, mappings and the cwd (the state of CRIU's
 * zdtm tests unlink_fstat00, unlink_mmap00/01, cwd01 and cwd02, set up by our own code). CRIU
 * saves each inode as a ghost file that restore recreates beside the old path, opens and
 * removes again.
 *
 *   small   5000 bytes, mode 0640, times set (atime A_SEC.A_NSEC, mtime M_SEC.M_NSEC): fd 3 at
 *           offset 123 and fd 4 (a second open, read-only, offset 0), then unlinked
 *   big     pages 0 and 1 and 100 bytes at page 7 written, a hole between (7 pages + 100
 *           bytes): fd 5 at offset 4096, then unlinked; its first two pages also mapped
 *           MAP_PRIVATE, page 1 written there (a private copy)
 *   mapped  3 pages, mapped MAP_SHARED and written through the mapping, its fd closed, then
 *           unlinked: only the mapping holds it
 *   gone    a directory opened as fd 6, made the cwd, then removed
 *   procdir a child (forked first, holding none of the above) whose cwd is /proc/PID of its own
 *           child, killed and reaped since (zdtm unhashed_proc): restore gives that PID to a
 *           helper process while it opens the directory, and reaps it
 *
 * Check (SIGUSR1): every fd's inode unlinked (no links), its size, mode, offset and contents
 * (the hole still a hole to SEEK_DATA), fds 3 and 4 one inode (a write through one is read
 * through the other, then the byte and the times put back), the times as set (atime at the
 * first check only: reads may move it), both
 * mappings' pages, and the cwd a removed directory that fd 6 is open on; procdir, told over a
 * pipe, that getcwd() fails with ENOENT and /proc/self/cwd reads as before ("/proc/PID (deleted)").
 *
 * READY line:  READY pid=P procdir=C
 * CHECK line:  CHECK OK ghosts=4 procdir=1
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define SMALL_SIZE 5000
#define SMALL_POS 123
#define BIG_SIZE (7 * 4096 + 100)
#define BIG_POS 4096
#define MAPPED_PAGES 3
#define A_SEC 2000000000L
#define A_NSEC 123456789L
#define M_SEC 1100000000L
#define M_NSEC 987654321L

static int small, small2, big, gone;
static unsigned char *bigmap, *sharedmap;
static int checks;

static unsigned char small_byte(int i)
{
	return (unsigned char)(i * 13 + 5);
}

static void tail_bytes(unsigned char *out)
{
	for (int i = 0; i < 100; i++)
		out[i] = (unsigned char)(250 - i);
}

static int open_in(const char *dir, const char *name, int flags)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return open(path, flags, 0640);
}

static void unlink_in(const char *dir, const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (unlink(path) < 0)
		setup_fail("unlink %s", path);
}

static void setup(const char *dir)
{
	long page = 4096;
	unsigned char buf[SMALL_SIZE];
	for (int i = 0; i < SMALL_SIZE; i++)
		buf[i] = small_byte(i);
	small = open_in(dir, "small", O_RDWR | O_CREAT | O_TRUNC);
	if (small != 3 || fchmod(small, 0640) < 0 || write_full(small, buf, SMALL_SIZE) < 0)
		setup_fail("small");
	small2 = open_in(dir, "small", O_RDONLY);
	struct timespec times[2] = { { A_SEC, A_NSEC }, { M_SEC, M_NSEC } };
	if (small2 != 4 || futimens(small, times) < 0 || lseek(small, SMALL_POS, SEEK_SET) != SMALL_POS)
		setup_fail("small's second fd, times or offset");
	unlink_in(dir, "small");

	big = open_in(dir, "big", O_RDWR | O_CREAT | O_TRUNC);
	unsigned char pg[4096], tail[100];
	tail_bytes(tail);
	if (big != 5 || ftruncate(big, BIG_SIZE) < 0)
		setup_fail("big");
	for (int p = 0; p < 2; p++) {
		fill_pattern_page(pg, "ghost-big", p);
		if (pwrite(big, pg, sizeof(pg), p * page) != (ssize_t)sizeof(pg))
			setup_fail("big page %d", p);
	}
	if (pwrite(big, tail, sizeof(tail), 7 * page) != (ssize_t)sizeof(tail) || lseek(big, BIG_POS, SEEK_SET) != BIG_POS)
		setup_fail("big's tail or offset");
	bigmap = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, big, 0);
	if (bigmap == MAP_FAILED)
		setup_fail("mmap big");
	fill_pattern_page(bigmap + page, "ghost-private", 1);
	unlink_in(dir, "big");

	int m = open_in(dir, "mapped", O_RDWR | O_CREAT | O_TRUNC);
	if (m < 0 || ftruncate(m, MAPPED_PAGES * page) < 0)
		setup_fail("mapped");
	sharedmap = mmap(NULL, MAPPED_PAGES * page, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
	if (sharedmap == MAP_FAILED)
		setup_fail("mmap mapped");
	for (int p = 0; p < MAPPED_PAGES; p++)
		fill_pattern_page(sharedmap + p * page, "ghost-shared", p);
	close(m);
	unlink_in(dir, "mapped");

	char path[4200];
	snprintf(path, sizeof(path), "%s/gone", dir);
	if (mkdir(path, 0750) < 0 && errno != EEXIST)
		setup_fail("mkdir gone");
	gone = open(path, O_RDONLY | O_DIRECTORY);
	if (gone != 6 || chdir(path) < 0 || rmdir(path) < 0)
		setup_fail("gone");
}

static void check_small(char *err, size_t errsz)
{
	struct stat st, st2;
	if (fstat(small, &st) < 0 || fstat(small2, &st2) < 0) {
		append(err, errsz, "small: fstat: %s; ", strerror(errno));
		return;
	}
	if (st.st_nlink != 0 || st.st_size != SMALL_SIZE || st.st_mode != (S_IFREG | 0640))
		append(err, errsz, "small: nlink %ld size %ld mode 0%o; ", (long)st.st_nlink, (long)st.st_size,
		       (unsigned)st.st_mode);
	/* criu keeps times to the microsecond */
	if (st.st_mtim.tv_sec != M_SEC || st.st_mtim.tv_nsec / 1000 != M_NSEC / 1000)
		append(err, errsz, "small: mtime %ld.%09ld; ", (long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	if (checks == 0 && (st.st_atim.tv_sec != A_SEC || st.st_atim.tv_nsec / 1000 != A_NSEC / 1000))
		append(err, errsz, "small: atime %ld.%09ld; ", (long)st.st_atim.tv_sec, st.st_atim.tv_nsec);
	if (st.st_ino != st2.st_ino || st.st_dev != st2.st_dev)
		append(err, errsz, "small: fds 3 and 4 are not one inode; ");
	if (lseek(small, 0, SEEK_CUR) != SMALL_POS || lseek(small2, 0, SEEK_CUR) != 0)
		append(err, errsz, "small: offsets %ld/%ld; ", (long)lseek(small, 0, SEEK_CUR),
		       (long)lseek(small2, 0, SEEK_CUR));
	unsigned char buf[SMALL_SIZE];
	if (pread(small2, buf, sizeof(buf), 0) != SMALL_SIZE)
		append(err, errsz, "small: short read; ");
	for (int i = 0; i < SMALL_SIZE; i++)
		if (buf[i] != small_byte(i)) {
			append(err, errsz, "small: byte %d is %d; ", i, buf[i]);
			break;
		}
	unsigned char x = 'X', back = 0;
	if (pwrite(small, &x, 1, 10) != 1 || pread(small2, &back, 1, 10) != 1 || back != 'X')
		append(err, errsz, "small: a write through fd 3 is not read through fd 4; ");
	x = small_byte(10);
	struct timespec times[2] = { { A_SEC, A_NSEC }, { M_SEC, M_NSEC } };
	if (pwrite(small, &x, 1, 10) != 1 || futimens(small, times) < 0)
		append(err, errsz, "small: cannot put byte 10 and the times back; ");
}

static void check_big(char *err, size_t errsz)
{
	struct stat st;
	if (fstat(big, &st) < 0 || st.st_nlink != 0 || st.st_size != BIG_SIZE)
		append(err, errsz, "big: nlink %ld size %ld; ", (long)st.st_nlink, (long)st.st_size);
	if (lseek(big, 0, SEEK_CUR) != BIG_POS)
		append(err, errsz, "big: offset %ld; ", (long)lseek(big, 0, SEEK_CUR));
	if (lseek(big, 2 * 4096, SEEK_DATA) != 7 * 4096)
		append(err, errsz, "big: data after the first two pages starts at %ld; ", (long)lseek(big, 2 * 4096, SEEK_DATA));
	if (lseek(big, BIG_POS, SEEK_SET) != BIG_POS)
		append(err, errsz, "big: cannot put the offset back; ");
	static unsigned char buf[BIG_SIZE];
	if (pread(big, buf, sizeof(buf), 0) != BIG_SIZE) {
		append(err, errsz, "big: short read; ");
		return;
	}
	unsigned char tail[100];
	tail_bytes(tail);
	if (!page_is(buf, "ghost-big", 0) || !page_is(buf + 4096, "ghost-big", 1) || memcmp(buf + 7 * 4096, tail, 100))
		append(err, errsz, "big: contents; ");
	for (int i = 2 * 4096; i < 7 * 4096; i++)
		if (buf[i]) {
			append(err, errsz, "big: byte %d of the hole is %d; ", i, buf[i]);
			break;
		}
	if (!page_is(bigmap, "ghost-big", 0) || !page_is(bigmap + 4096, "ghost-private", 1))
		append(err, errsz, "big: its private mapping; ");
}

static void check_mapped_and_gone(char *err, size_t errsz)
{
	for (int p = 0; p < MAPPED_PAGES; p++)
		if (!page_is(sharedmap + p * 4096, "ghost-shared", p))
			append(err, errsz, "mapped: page %d; ", p);
	struct stat cwd, fd;
	if (stat(".", &cwd) < 0 || fstat(gone, &fd) < 0) {
		append(err, errsz, "gone: stat: %s; ", strerror(errno));
		return;
	}
	if (!S_ISDIR(cwd.st_mode) || cwd.st_nlink != 0 || (cwd.st_mode & 07777) != 0750)
		append(err, errsz, "gone: the cwd has mode 0%o and %ld links; ", (unsigned)cwd.st_mode, (long)cwd.st_nlink);
	if (cwd.st_ino != fd.st_ino || cwd.st_dev != fd.st_dev)
		append(err, errsz, "gone: fd 6 is not open on the cwd; ");
}

static void procdir_check(const char *was, char *err, size_t errsz)
{
	char buf[4096];
	errno = 0;
	if (getcwd(buf, sizeof(buf)))
		append(err, errsz, "procdir: getcwd gave %s; ", buf);
	else if (errno != ENOENT)
		append(err, errsz, "procdir: getcwd: %s; ", strerror(errno));
	ssize_t n = readlink("/proc/self/cwd", buf, sizeof(buf) - 1);
	if (n < 0) {
		append(err, errsz, "procdir: readlink /proc/self/cwd: %s; ", strerror(errno));
		return;
	}
	buf[n] = 0;
	if (strcmp(buf, was))
		append(err, errsz, "procdir: the cwd is %s, was %s; ", buf, was);
}

/* procdir: its cwd in the /proc directory of its child, which it kills and reaps; then a verdict
 * over `report` once set up and at every SIGUSR1 */
static void __attribute__((noreturn)) procdir_child(int report, const sigset_t *blocked, const sigset_t *waitmask)
{
	pid_t gc = fork();
	if (gc < 0)
		setup_fail("fork procdir's child");
	if (gc == 0)
		for (;;)
			pause();
	char path[64], was[128];
	snprintf(path, sizeof(path), "/proc/%d", (int)gc);
	if (chdir(path) < 0)
		setup_fail("chdir %s", path);
	kill(gc, SIGKILL);
	while (waitpid(gc, NULL, 0) < 0 && errno == EINTR)
		;
	ssize_t n = readlink("/proc/self/cwd", was, sizeof(was) - 1);
	if (n < 0)
		setup_fail("readlink /proc/self/cwd");
	was[n] = 0;
	char err[REPORT_LEN] = "";
	procdir_check(was, err, sizeof(err));
	if (err[0])
		setup_fail("%s", err);
	for (;;) {
		if (send_report(report, err) < 0)
			_exit(1);
		wait_for_usr1(blocked, waitmask);
		err[0] = 0;
		procdir_check(was, err, sizeof(err));
	}
}

/* fork procdir; the parent's end of its pipe, above the fds the ghosts take */
static int start_procdir(pid_t *child, const sigset_t *blocked, const sigset_t *waitmask)
{
	int p[2];
	if (pipe(p) < 0)
		setup_fail("pipe");
	*child = fork();
	if (*child < 0)
		setup_fail("fork procdir");
	if (*child == 0) {
		int report = fcntl(p[1], F_DUPFD, 10);
		if (report < 0)
			setup_fail("dup procdir's pipe");
		close(p[0]);
		close(p[1]);
		procdir_child(report, blocked, waitmask);
	}
	int verdicts = fcntl(p[0], F_DUPFD, 10);
	if (verdicts < 0)
		setup_fail("dup procdir's pipe");
	close(p[0]);
	close(p[1]);
	char verdict[REPORT_LEN + 1];
	if (recv_report(verdicts, verdict) < 0 || strcmp(verdict, "OK"))
		setup_fail("procdir's set-up (see its SETUP FAIL line)");
	return verdicts;
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	pid_t procdir;
	int verdicts = start_procdir(&procdir, &blocked, &waitmask);
	setup(work_dir("ghosts"));
	say("READY pid=%d procdir=%d", (int)getpid(), (int)procdir);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		char err[2048] = "";
		check_small(err, sizeof(err));
		check_big(err, sizeof(err));
		check_mapped_and_gone(err, sizeof(err));
		char verdict[REPORT_LEN + 1];
		if (kill(procdir, SIGUSR1) < 0 || recv_report(verdicts, verdict) < 0)
			append(err, sizeof(err), "procdir: no verdict; ");
		else if (strcmp(verdict, "OK"))
			append(err, sizeof(err), "%s", verdict);
		checks++;
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK ghosts=4 procdir=1");
	}
}
