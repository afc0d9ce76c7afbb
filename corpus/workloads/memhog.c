/* cflags: */
/* memhog MIB [write PERMILLE] - a large anonymous mapping with a verifiable pattern.
 *
 * MIB (0..8192) MiB of MAP_PRIVATE|MAP_ANONYMOUS memory.  Every page whose
 * index is a multiple of 16 is left all-zero (it is only read, so it maps the
 * shared zero page); every other page is filled word by word with
 *     word[w] = mix64(seed ^ page * K) + (w + 1) * K2
 * which is unique per (seed, page, word) and costs one add per word, so the
 * fill stays fast under QEMU TCG.  A small malloc'ed heap region carries a
 * pattern too.  On SIGUSR1 every byte of every page (and the heap region) is
 * re-verified.
 *
 * write PERMILLE: after READY, memory keeps changing at a known rate: each second PERMILLE
 * per mille of the non-zero pages are rewritten, one by one and round-robin, each with the
 * pattern of its next generation (a counter per page, kept in a separate array): a snapshot
 * that mixes a page's old contents with its new generation, or the reverse, fails the check.
 * The check runs between writes; after a restore the write under way completes first.
 *
 * READY line:  READY mib=N pages=P seed=0xS zero_pages=Z heap_bytes=H writes_per_s=W
 * CHECK line:  CHECK OK pages=P zero_pages=Z heap_bytes=H
 *              CHECK FAIL page=I word=W expected=0x.. got=0x..
 *              CHECK FAIL heap byte=I
 */
#include "common.h"
#include <sys/mman.h>

#define PAGE 4096UL
#define WORDS (PAGE / sizeof(uint64_t))
#define K1 0xD6E8FEB86659FD93ULL
#define K2 0x9E3779B97F4A7C15ULL
#define K3 0xC2B2AE3D27D4EB4FULL
#define HEAP_BYTES 12345UL

static uint64_t seed;
static uint32_t *generation;	/* per page: how many times the writer rewrote it */

static inline int is_zero_page(size_t i) { return (i % 16) == 0; }
static inline uint64_t page_base(size_t i)
{
	uint64_t gen = generation ? generation[i] : 0;
	return mix64(seed ^ ((uint64_t)i * K1) ^ (gen * K3));
}

static void fill_page(uint64_t *p, size_t i)
{
	uint64_t v = page_base(i);
	for (size_t w = 0; w < WORDS; w++) {
		v += K2;
		p[w] = v;
	}
}

/* Returns the first bad word index, or -1. */
static long check_page(const uint64_t *p, size_t i, uint64_t *exp, uint64_t *got)
{
	if (is_zero_page(i)) {
		for (size_t w = 0; w < WORDS; w++)
			if (p[w]) {
				*exp = 0;
				*got = p[w];
				return (long)w;
			}
		return -1;
	}
	uint64_t v = page_base(i);
	for (size_t w = 0; w < WORDS; w++) {
		v += K2;
		if (p[w] != v) {
			*exp = v;
			*got = p[w];
			return (long)w;
		}
	}
	return -1;
}

static unsigned char heap_byte(size_t i) { return (unsigned char)(mix64(seed + i) >> 56); }

int main(int argc, char **argv)
{
	setsid();

	long mib = argc > 1 ? strtol(argv[1], NULL, 0) : 64;
	if (mib < 0 || mib > 8192)
		setup_fail("MiB must be 0..8192, got %ld", mib);
	long permille = 0;
	if (argc > 2) {
		if (strcmp(argv[2], "write") != 0 || argc != 4)
			setup_fail("usage: memhog MIB [write PERMILLE]");
		permille = strtol(argv[3], NULL, 0);
		if (permille < 1 || permille > 1000)
			setup_fail("PERMILLE must be 1..1000, got %ld", permille);
	}

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	seed = fresh_seed();
	size_t pages = (size_t)mib * (1024 * 1024 / PAGE);
	unsigned char *mem = NULL;
	if (pages) {
		mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			setup_fail("mmap %zu pages", pages);
	}
	if (permille && pages) {
		generation = calloc(pages, sizeof(*generation));
		if (!generation)
			setup_fail("calloc generations");
	}
	size_t zero_pages = 0;
	for (size_t i = 0; i < pages; i++) {
		uint64_t *p = (uint64_t *)(mem + i * PAGE);
		if (is_zero_page(i)) {
			/* Read-fault only: maps the shared zero page. */
			(void)*(volatile uint64_t *)p;
			zero_pages++;
		} else {
			fill_page(p, i);
		}
	}

	unsigned char *heap = malloc(HEAP_BYTES);
	if (!heap)
		setup_fail("malloc");
	for (size_t i = 0; i < HEAP_BYTES; i++)
		heap[i] = heap_byte(i);

	size_t writes_per_s = (pages - zero_pages) * (size_t)permille / 1000;
	if (permille && !writes_per_s)
		writes_per_s = 1;
	say("READY mib=%ld pages=%zu seed=0x%016llx zero_pages=%zu heap_bytes=%lu writes_per_s=%zu",
	    mib, pages, (unsigned long long)seed, zero_pages, HEAP_BYTES, writes_per_s);

	size_t next = 0;
	for (;;) {
		if (writes_per_s && pages > zero_pages) {
			/* 100 slices a second, each rewriting its share of pages; SIGUSR1 stays blocked
			 * (it is only taken between slices, as the check must not see a page half written) */
			size_t per_slice = writes_per_s / 100 + (next % 100 < writes_per_s % 100);
			for (size_t n = 0; n < per_slice; n++) {
				do
					next = (next + 1) % pages;
				while (is_zero_page(next));
				generation[next]++;
				fill_page((uint64_t *)(mem + next * PAGE), next);
			}
			struct timespec slice = { 0, 10 * 1000 * 1000 };
			sigset_t usr1;
			sigemptyset(&usr1);
			sigaddset(&usr1, SIGUSR1);
			sigprocmask(SIG_UNBLOCK, &usr1, NULL);
			nanosleep(&slice, NULL);
			block_set(&blocked);
			if (!usr1_flag)
				continue;
		} else {
			block_set(&blocked);
			while (!usr1_flag)
				sigsuspend(&waitmask);
		}
		usr1_flag = 0;

		int bad = 0;
		for (size_t i = 0; i < pages && !bad; i++) {
			uint64_t exp, got;
			long w = check_page((const uint64_t *)(mem + i * PAGE), i, &exp, &got);
			if (w >= 0) {
				say("CHECK FAIL page=%zu word=%ld expected=0x%016llx got=0x%016llx",
				    i, w, (unsigned long long)exp, (unsigned long long)got);
				bad = 1;
			}
		}
		for (size_t i = 0; i < HEAP_BYTES && !bad; i++)
			if (heap[i] != heap_byte(i)) {
				say("CHECK FAIL heap byte=%zu", i);
				bad = 1;
			}
		if (!bad)
			say("CHECK OK pages=%zu zero_pages=%zu heap_bytes=%lu",
			    pages, zero_pages, HEAP_BYTES);
	}
}
