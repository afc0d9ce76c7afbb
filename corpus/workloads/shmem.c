/* cflags: */
/* shmem - two processes sharing anonymous memory and a file-backed shared mapping.
 *
 * Root R maps, before forking its child K:
 *   anon   16 pages MAP_SHARED|MAP_ANONYMOUS; R wrote pages 0-3, K wrote pages 8-11,
 *          the rest were never touched;
 *   file   dir/shared.dat (8 pages) MAP_SHARED; R wrote pages 0-1, K wrote page 5.
 * K also maps pages 2-4 of the same file on its own (MAP_SHARED, file offset 2 pages)
 * and wrote page 3 (the file's) through that mapping.
 * K then blocks in read() on a pipe from R.
 *
 * Check (SIGUSR1 to R): R verifies every pattern (in both mappings, so K's writes must be
 * visible to R after restore), writes a probe into anon page 15 and file page 7 and wakes
 * K, which verifies the patterns and the probes, writes an answer into anon page 14 and
 * reports through a pipe; R then sees K's answer: the memory is still shared.
 *
 * READY line:  READY root=R child=K
 * CHECK line:  CHECK OK root=R child=K probes=N
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define PG 4096
#define ANON_PAGES 16
#define FILE_PAGES 8

static unsigned char *anon, *filemap, *kmap;

static int zero(const unsigned char *page)
{
	for (int i = 0; i < PG; i++)
		if (page[i])
			return 0;
	return 1;
}

/* Every pattern the workload wrote, as seen through this process's mappings. */
static void verify(char *err, size_t errsz, const char *who, int in_child)
{
	for (int p = 0; p < ANON_PAGES; p++) {
		int ok;
		if (p < 4)
			ok = page_is(anon + p * PG, "R-anon", p);
		else if (p >= 8 && p < 12)
			ok = page_is(anon + p * PG, "K-anon", p);
		else if (p >= 14)
			continue;	/* probe and answer pages */
		else
			ok = zero(anon + p * PG);
		if (!ok)
			append(err, errsz, "%s: anon page %d wrong; ", who, p);
	}
	for (int p = 0; p < FILE_PAGES - 1; p++) {
		int ok;
		if (p < 2)
			ok = page_is(filemap + p * PG, "R-file", p);
		else if (p == 5)
			ok = page_is(filemap + p * PG, "K-file", p);
		else if (p == 3)
			ok = page_is(filemap + p * PG, "K-own-map", p);
		else
			ok = zero(filemap + p * PG);
		if (!ok)
			append(err, errsz, "%s: file page %d wrong; ", who, p);
	}
	if (in_child && !page_is(kmap + PG, "K-own-map", 3))
		append(err, errsz, "%s: own file mapping page 3 wrong; ", who);
}

static void child(int ctl, int report)
{
	signal(SIGUSR1, SIG_IGN);
	for (int p = 8; p < 12; p++)
		fill_pattern_page(anon + p * PG, "K-anon", p);
	fill_pattern_page(filemap + 5 * PG, "K-file", 5);
	fill_pattern_page(kmap + PG, "K-own-map", 3);	/* file page 3 through the mapping at file page 2 */
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
		verify(err, sizeof(err), "child", 1);
		if (!page_is(anon + 15 * PG, "R-probe", probe))
			append(err, sizeof(err), "child: no probe %d in anon page 15; ", probe);
		if (!page_is(filemap + 7 * PG, "R-probe", probe))
			append(err, sizeof(err), "child: no probe %d in file page 7; ", probe);
		fill_pattern_page(anon + 14 * PG, "K-answer", probe);
		if (send_report(report, err) < 0)
			_exit(1);
	}
}

int main(void)
{
	setsid();
	const char *dir = work_dir("shmem");
	char path[4200];
	snprintf(path, sizeof(path), "%s/shared.dat", dir);

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	anon = mmap(NULL, ANON_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (anon == MAP_FAILED)
		setup_fail("mmap shared anonymous");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, FILE_PAGES * PG) < 0)
		setup_fail("create %s", path);
	filemap = mmap(NULL, FILE_PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (filemap == MAP_FAILED)
		setup_fail("mmap %s shared", path);
	for (int p = 0; p < 4; p++)
		fill_pattern_page(anon + p * PG, "R-anon", p);
	for (int p = 0; p < 2; p++)
		fill_pattern_page(filemap + p * PG, "R-file", p);

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
		kmap = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * PG);
		if (kmap == MAP_FAILED)
			_exit(1);
		close(fd);	/* the mappings keep the file */
		child(ctl[0], rep[1]);
	}
	close(ctl[0]);
	close(rep[1]);
	close(fd);
	int ready = 0;
	for (int tries = 0; tries < 500 && !ready; tries++) {
		ready = page_is(anon + 11 * PG, "K-anon", 11) && page_is(filemap + 3 * PG, "K-own-map", 3) &&
			page_is(filemap + 5 * PG, "K-file", 5);
		if (!ready)
			sleep_ms(10);
	}
	if (!ready)
		setup_fail("the child's writes did not show");
	say("READY root=%d child=%d", (int)getpid(), (int)k);

	for (int probe = 1;; probe++) {
		wait_for_usr1(&blocked, &waitmask);
		char err[2048] = "";
		verify(err, sizeof(err), "root", 0);
		fill_pattern_page(anon + 15 * PG, "R-probe", probe);
		fill_pattern_page(filemap + 7 * PG, "R-probe", probe);
		if (write(ctl[1], "c", 1) != 1)
			append(err, sizeof(err), "ctl write: %s; ", strerror(errno));
		char msg[REPORT_LEN + 1];
		if (recv_report(rep[0], msg) < 0) {
			append(err, sizeof(err), "no report from the child; ");
		} else {
			if (strcmp(msg, "OK"))
				append(err, sizeof(err), "%s", msg);
			if (!page_is(anon + 14 * PG, "K-answer", probe))
				append(err, sizeof(err), "root: no answer %d in anon page 14; ", probe);
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
