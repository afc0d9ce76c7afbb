/* cflags: */
/* filemap - open files, file offsets/flags and file-backed mappings.
 *
 * In $OVM_RUN_DIR/filemap (default /run/ovm/filemap) it creates:
 *   ro.txt      10000 bytes of text, O_RDONLY, offset 1234
 *   rw.bin      8192 bytes,          O_RDWR,   offset 4103 (also dup2'ed to fd 17)
 *   append.log  a few lines,         O_WRONLY|O_APPEND|O_CLOEXEC, offset = size
 *   map-ro.bin  64 KiB, mmap PROT_READ MAP_PRIVATE, 32 KiB at file offset 4096
 *               (its fd is closed: only the mapping references the file)
 *   map-cow.bin 16 KiB, mmap PROT_READ|PROT_WRITE MAP_PRIVATE, page 1 modified
 *               in memory (an anonymous COW page), the others only read
 * and sets umask 027 and cwd to that directory.  fd 17 leaves a gap in the fd
 * table.  The files must exist unchanged at restore time (they are on tmpfs).
 *
 * READY line:  READY ro_fd=A rw_fd=B append_fd=C dup_fd=17 cow_fd=D
 *                    map_ro=0xADDR map_cow=0xADDR cow_page=1 dir=PATH
 * CHECK line:  CHECK OK fds=5 maps=2 umask=027 cwd=PATH
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>

#define PAGE 4096
#define RO_SIZE 10000
#define RO_OFF 1234
#define RW_SIZE 8192
#define RW_OFF 4103
#define DUP_FD 17
#define MAPRO_SIZE (64 * 1024)
#define MAPRO_OFF 4096
#define MAPRO_LEN (32 * 1024)
#define COW_SIZE (16 * 1024)
#define COW_PAGE 1

static const char *append_lines = "line one\nline two\nline three\n";

/* Deterministic file contents, so the check can recompute them. */
static unsigned char file_byte(int file, size_t i)
{
	if (file == 0)			/* ro.txt: printable text with newlines */
		return (i % 64 == 63) ? '\n' : (unsigned char)('a' + (i * 7 + i / 64) % 26);
	return (unsigned char)(mix64(((uint64_t)file << 40) + i) >> 56);
}

static void make_file(const char *name, int file, size_t size)
{
	unsigned char *buf = malloc(size);
	if (!buf)
		setup_fail("malloc");
	for (size_t i = 0; i < size; i++)
		buf[i] = file_byte(file, i);
	int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write_full(fd, buf, size) < 0 || close(fd) < 0)
		setup_fail("create %s", name);
	free(buf);
}

static char dir[PATH_MAX];
static int ro_fd, rw_fd, app_fd, cow_fd;
static unsigned char *map_ro, *map_cow;
static size_t append_len;

static unsigned char cow_byte(size_t i) { return (unsigned char)(0xA5 ^ (i * 13)); }

static void check(void)
{
	char err[1024] = "";

	struct { int fd; off_t pos; int acc; int append; int cloexec; const char *name; } f[] = {
		{ ro_fd, RO_OFF, O_RDONLY, 0, 0, "ro" },
		{ rw_fd, RW_OFF, O_RDWR, 0, 0, "rw" },
		{ app_fd, (off_t)append_len, O_WRONLY, 1, 1, "append" },
		{ DUP_FD, RW_OFF, O_RDWR, 0, 0, "dup17" },
		{ cow_fd, 0, O_RDONLY, 0, 1, "cow" },
	};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		off_t pos = lseek(f[i].fd, 0, SEEK_CUR);
		int fl = fcntl(f[i].fd, F_GETFL);
		int fdfl = fcntl(f[i].fd, F_GETFD);
		if (pos != f[i].pos)
			append(err, sizeof(err), "%s pos=%lld want %lld; ", f[i].name,
			       (long long)pos, (long long)f[i].pos);
		if (fl < 0 || (fl & O_ACCMODE) != f[i].acc || !!(fl & O_APPEND) != f[i].append)
			append(err, sizeof(err), "%s flags=0%o; ", f[i].name, fl);
		if (fdfl < 0 || !!(fdfl & FD_CLOEXEC) != f[i].cloexec)
			append(err, sizeof(err), "%s fdflags=%d; ", f[i].name, fdfl);
	}
	/* fd 17 must share the file description of rw_fd (same inode at least). */
	struct stat a, b;
	if (fstat(rw_fd, &a) < 0 || fstat(DUP_FD, &b) < 0 ||
	    a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		append(err, sizeof(err), "fd17 is not rw.bin; ");

	/* File contents (pread does not move the offsets). */
	unsigned char buf[MAPRO_SIZE];
	if (pread(ro_fd, buf, RO_SIZE, 0) != RO_SIZE)
		append(err, sizeof(err), "ro.txt short; ");
	else
		for (size_t i = 0; i < RO_SIZE; i++)
			if (buf[i] != file_byte(0, i)) {
				append(err, sizeof(err), "ro.txt byte %zu; ", i);
				break;
			}

	/* Read-only mapping == file bytes at 4096.. (recomputed and reread). */
	int fd = open("map-ro.bin", O_RDONLY);	/* relative: also tests cwd */
	if (fd < 0 || pread(fd, buf, MAPRO_SIZE, 0) != MAPRO_SIZE)
		append(err, sizeof(err), "map-ro.bin unreadable; ");
	else if (memcmp(map_ro, buf + MAPRO_OFF, MAPRO_LEN) != 0)
		append(err, sizeof(err), "map_ro differs from file; ");
	for (size_t i = 0; i < MAPRO_LEN; i++)
		if (map_ro[i] != file_byte(3, MAPRO_OFF + i)) {
			append(err, sizeof(err), "map_ro byte %zu; ", i);
			break;
		}
	if (fd >= 0)
		close(fd);

	/* COW mapping: page COW_PAGE modified, the rest equal to the file. */
	if (pread(cow_fd, buf, COW_SIZE, 0) != COW_SIZE)
		append(err, sizeof(err), "map-cow.bin unreadable; ");
	for (size_t i = 0; i < COW_SIZE; i++) {
		int in_cow = i / PAGE == COW_PAGE;
		unsigned char want = in_cow ? cow_byte(i) : file_byte(4, i);
		if (map_cow[i] != want) {
			append(err, sizeof(err), "map_cow byte %zu; ", i);
			break;
		}
		if (in_cow && buf[i] != file_byte(4, i)) {
			append(err, sizeof(err), "cow write leaked to file at %zu; ", i);
			break;
		}
	}

	mode_t um = umask(027);
	if (um != 027)
		append(err, sizeof(err), "umask=0%o; ", (unsigned)um);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)) || strcmp(cwd, dir) != 0)
		append(err, sizeof(err), "cwd changed; ");

	if (err[0])
		say("CHECK FAIL %s", err);
	else
		say("CHECK OK fds=5 maps=2 umask=027 cwd=%s", dir);
}

int main(void)
{
	setsid();

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	if (!realpath(work_dir("filemap"), dir))
		setup_fail("realpath");
	if (chdir(dir) < 0)
		setup_fail("chdir %s", dir);
	umask(027);

	make_file("ro.txt", 0, RO_SIZE);
	make_file("rw.bin", 1, RW_SIZE);
	make_file("map-ro.bin", 3, MAPRO_SIZE);
	make_file("map-cow.bin", 4, COW_SIZE);
	unlink("append.log");

	if ((ro_fd = open("ro.txt", O_RDONLY)) < 0 || lseek(ro_fd, RO_OFF, SEEK_SET) != RO_OFF)
		setup_fail("ro.txt");
	if ((rw_fd = open("rw.bin", O_RDWR)) < 0 || lseek(rw_fd, RW_OFF, SEEK_SET) != RW_OFF)
		setup_fail("rw.bin");
	if (dup2(rw_fd, DUP_FD) != DUP_FD)	/* shares offset; no FD_CLOEXEC */
		setup_fail("dup2");
	app_fd = open("append.log", O_WRONLY | O_APPEND | O_CLOEXEC | O_CREAT, 0640);
	append_len = strlen(append_lines);
	if (app_fd < 0 || write_full(app_fd, append_lines, append_len) < 0)
		setup_fail("append.log");

	int fd = open("map-ro.bin", O_RDONLY);
	if (fd < 0)
		setup_fail("map-ro.bin");
	map_ro = mmap(NULL, MAPRO_LEN, PROT_READ, MAP_PRIVATE, fd, MAPRO_OFF);
	if (map_ro == MAP_FAILED)
		setup_fail("mmap map-ro.bin");
	close(fd);	/* the mapping alone keeps the file referenced */
	for (size_t i = 0; i < MAPRO_LEN; i += PAGE)
		(void)*(volatile unsigned char *)(map_ro + i);

	/* Kept open (O_RDONLY, FD_CLOEXEC set via fcntl) to compare against;
	 * a MAP_PRIVATE writable mapping does not need a writable fd. */
	cow_fd = open("map-cow.bin", O_RDONLY);
	if (cow_fd < 0 || fcntl(cow_fd, F_SETFD, FD_CLOEXEC) < 0)
		setup_fail("map-cow.bin");
	map_cow = mmap(NULL, COW_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, cow_fd, 0);
	if (map_cow == MAP_FAILED)
		setup_fail("mmap map-cow.bin");
	for (size_t i = 0; i < COW_SIZE; i += PAGE)
		(void)*(volatile unsigned char *)(map_cow + i);
	for (size_t i = COW_PAGE * PAGE; i < (COW_PAGE + 1) * PAGE; i++)
		map_cow[i] = cow_byte(i);

	say("READY ro_fd=%d rw_fd=%d append_fd=%d dup_fd=%d cow_fd=%d map_ro=%p map_cow=%p cow_page=%d dir=%s",
	    ro_fd, rw_fd, app_fd, DUP_FD, cow_fd, (void *)map_ro, (void *)map_cow, COW_PAGE, dir);

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		check();
	}
}
