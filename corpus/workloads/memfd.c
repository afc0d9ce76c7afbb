/* cflags: */
/* memfd - memfds and a shared anonymous mapping's file held open (the state of CRIU's zdtm
 * tests memfd00, memfd01 and shmemfd, set up by our own code):
 *
 *   a    memfd "ovm-a" (MFD_ALLOW_SEALING), 10000 bytes of pattern, offset 1234, sealed
 *        F_SEAL_SHRINK | F_SEAL_GROW; a second fd on it by dup()
 *   b    memfd "ovm-b", 3 pages, also mapped MAP_SHARED; written through the mapping
 *   z    "/dev/zero" of a MAP_SHARED|MAP_ANONYMOUS page opened through /proc/self/map_files,
 *        the mapping then unmapped, O_APPEND set, "hello" written, offset 3
 *
 * Check (SIGUSR1): a's offset, contents, seals, and that it can neither shrink nor grow; its
 * dup shares the offset; b's fd and mapping see each other's writes; z's offset, O_APPEND and
 * contents. Offsets are put back afterwards, so a later check passes too.
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK memfds=3
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/mman.h>

#define A_SIZE 10000
#define A_POS 1234
#define B_PAGES 3

static int a, a2, b, z;
static unsigned char *bmap;
static long page;

static unsigned char a_byte(int i)
{
	return (unsigned char)(i * 31 + 7);
}

static void check(char *err, size_t errsz)
{
	if (lseek(a, 0, SEEK_CUR) != A_POS || lseek(a2, 0, SEEK_CUR) != A_POS)
		append(err, errsz, "a: offset %ld/%ld, want %d; ", (long)lseek(a, 0, SEEK_CUR),
		       (long)lseek(a2, 0, SEEK_CUR), A_POS);
	unsigned char buf[A_SIZE];
	if (pread(a, buf, sizeof(buf), 0) != A_SIZE)
		append(err, errsz, "a: short read; ");
	for (int i = 0; i < A_SIZE; i++)
		if (buf[i] != a_byte(i)) {
			append(err, errsz, "a: byte %d is %d; ", i, buf[i]);
			break;
		}
	int seals = fcntl(a, F_GET_SEALS);
	if (seals != (F_SEAL_SHRINK | F_SEAL_GROW))
		append(err, errsz, "a: seals 0x%x; ", seals);
	if (ftruncate(a, 100) == 0 || ftruncate(a, A_SIZE + 4096) == 0)
		append(err, errsz, "a: its size changed despite its seals; ");
	for (int p = 0; p < B_PAGES; p++)
		if (!page_is(bmap + p * page, "memfd-b", p))
			append(err, errsz, "b: page %d lost its pattern; ", p);
	if (pwrite(b, "fd-write", 8, 100) != 8 || memcmp(bmap + 100, "fd-write", 8))
		append(err, errsz, "b: fd and mapping are not one file; ");
	memset(bmap, 0, (size_t)page); /* put page 0 back */
	fill_pattern_page(bmap, "memfd-b", 0);
	char zb[8] = "";
	if (lseek(z, 0, SEEK_CUR) != 3 || !(fcntl(z, F_GETFL) & O_APPEND) || pread(z, zb, 5, 0) != 5 ||
	    memcmp(zb, "hello", 5))
		append(err, errsz, "z: offset %ld flags 0x%x contents '%.5s'; ", (long)lseek(z, 0, SEEK_CUR),
		       fcntl(z, F_GETFL), zb);
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	page = sysconf(_SC_PAGESIZE);

	a = memfd_create("ovm-a", MFD_ALLOW_SEALING);
	unsigned char buf[A_SIZE];
	for (int i = 0; i < A_SIZE; i++)
		buf[i] = a_byte(i);
	if (a < 0 || write_full(a, buf, sizeof(buf)) < 0 || lseek(a, A_POS, SEEK_SET) != A_POS ||
	    fcntl(a, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		setup_fail("memfd a");
	a2 = dup(a);

	b = memfd_create("ovm-b", 0);
	if (b < 0 || ftruncate(b, B_PAGES * page) < 0)
		setup_fail("memfd b");
	bmap = mmap(NULL, (size_t)(B_PAGES * page), PROT_READ | PROT_WRITE, MAP_SHARED, b, 0);
	if (bmap == MAP_FAILED)
		setup_fail("mmap b");
	for (int p = 0; p < B_PAGES; p++)
		fill_pattern_page(bmap + p * page, "memfd-b", p);

	void *anon = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (anon == MAP_FAILED)
		setup_fail("mmap shared anonymous");
	char path[128];
	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", (unsigned long)anon,
		 (unsigned long)anon + (unsigned long)page);
	z = open(path, O_RDWR);
	if (z < 0 || ftruncate(z, 0) < 0 || munmap(anon, (size_t)page) < 0 || fcntl(z, F_SETFL, O_APPEND) < 0 ||
	    write(z, "hello", 5) != 5 || lseek(z, 3, SEEK_SET) != 3)
		setup_fail("shared anonymous file %s", path);

	say("READY pid=%d", (int)getpid());

	serve_checks(&blocked, &waitmask, check, "CHECK OK memfds=3");
}
