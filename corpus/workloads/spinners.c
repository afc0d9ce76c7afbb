/* cflags: -pthread */
/* spinners - threads busy on the CPUs, carrying a computation in their registers.
 *
 * Each spinner repeats one deterministic round: a long loop in inline assembly that keeps
 * its whole state in registers (a counter in rcx, accumulators in rax, rbx, rdx, rsi, rdi
 * and r8-r15 mixed with add/adc/sbb/xor/rol, xmm0-xmm15 mixed with paddq/pxor/pshufd, and
 * ymm0-ymm15 with vpaddq/vpxor when the CPU has AVX2) and only stores it at the end. Every
 * round starts from the same values, so every round must end with the values the first one
 * (before READY) ended with; a register a restore got wrong shows up as a bad round.
 *
 * The VM is paused while the spinners are on the vCPUs (in user mode, mid-round): the
 * dumping tool must take their registers from the vCPU state.
 *
 * Usage:  spinners [N]        N spinner threads (1..8, default 2)
 * READY:  READY root=PID threads=N avx2=0|1 iters=ITERS
 * CHECK:  (on SIGUSR1) after every spinner has finished two more rounds:
 *         CHECK OK threads=N rounds=TOTAL avx2=0|1
 *         CHECK FAIL thread K: round R word W expected 0x.. got 0x..   (or: made no progress)
 * SPINNERS_CORRUPT=1 (test only) flips one bit of one round's result, to show the check works.
 */
#include "common.h"
#include <pthread.h>

#define MAX_THREADS 8
#define ITERS 2000000UL
#define WORDS (16 + 2 * 16 + 4 * 16)	/* gprs, xmm as 2 words, ymm as 4 words */
#define CHECK_DEADLINE_MS 40000

struct spinner {
	pthread_t thread;
	int index;
	volatile uint64_t rounds;
	volatile uint64_t bad;
	uint64_t reference[WORDS];
	char first_bad[256];
};

static struct spinner spinners[MAX_THREADS];
static int nthreads = 2;
static int use_avx2;
static int corrupt;

/* One round of the general-register and SSE computation; `out` gets 16 + 32 words: rax,
 * rbx, rdx, rsi, rdi, r8-r15, rbp, 2 zero words, xmm0-xmm15. */
static void round_sse(uint64_t iters, uint64_t *out)
{
	static const uint64_t init[48] = {
		0x0123456789abcdefULL, 0xfedcba9876543210ULL, 0x0f1e2d3c4b5a6978ULL, 0x1122334455667788ULL,
		0x99aabbccddeeff00ULL, 0x5555aaaa5555aaaaULL, 0x3141592653589793ULL, 0x2718281828459045ULL,
		0x1618033988749894ULL, 0x1414213562373095ULL, 0x1732050807568877ULL, 0x2236067977499789ULL,
		0x6180339887498948ULL, 0x5772156649015328ULL, 0, 0,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
		17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
	};
	uint64_t ctx[48];
	memcpy(ctx, init, sizeof(ctx));
	ctx[14] = iters;
	uint64_t *p = ctx;
	/* Every general register but rsp is in the loop: the context pointer travels in rdi,
	 * then on the stack (below the red zone, which the compiler may use here). */
	__asm__ volatile(
		"sub $128, %%rsp\n\t"
		"push %%rbp\n\t"
		"push %%rbx\n\t"
		"push %%rdi\n\t"
		"mov %%rdi, %%rbp\n\t"
		"movdqu 128(%%rbp), %%xmm0\n\t"   "movdqu 144(%%rbp), %%xmm1\n\t"
		"movdqu 160(%%rbp), %%xmm2\n\t"   "movdqu 176(%%rbp), %%xmm3\n\t"
		"movdqu 192(%%rbp), %%xmm4\n\t"   "movdqu 208(%%rbp), %%xmm5\n\t"
		"movdqu 224(%%rbp), %%xmm6\n\t"   "movdqu 240(%%rbp), %%xmm7\n\t"
		"movdqu 256(%%rbp), %%xmm8\n\t"   "movdqu 272(%%rbp), %%xmm9\n\t"
		"movdqu 288(%%rbp), %%xmm10\n\t"  "movdqu 304(%%rbp), %%xmm11\n\t"
		"movdqu 320(%%rbp), %%xmm12\n\t"  "movdqu 336(%%rbp), %%xmm13\n\t"
		"movdqu 352(%%rbp), %%xmm14\n\t"  "movdqu 368(%%rbp), %%xmm15\n\t"
		"mov 0(%%rbp), %%rax\n\t"   "mov 8(%%rbp), %%rbx\n\t"   "mov 16(%%rbp), %%rdx\n\t"
		"mov 24(%%rbp), %%rsi\n\t"  "mov 32(%%rbp), %%rdi\n\t"  "mov 40(%%rbp), %%r8\n\t"
		"mov 48(%%rbp), %%r9\n\t"   "mov 56(%%rbp), %%r10\n\t"  "mov 64(%%rbp), %%r11\n\t"
		"mov 72(%%rbp), %%r12\n\t"  "mov 80(%%rbp), %%r13\n\t"  "mov 88(%%rbp), %%r14\n\t"
		"mov 96(%%rbp), %%r15\n\t"  "mov 112(%%rbp), %%rcx\n\t"
		"mov 104(%%rbp), %%rbp\n\t"
		"1:\n\t"
		"add %%rbx, %%rax\n\t"  "adc %%rdx, %%rsi\n\t"   "rol $13, %%rbx\n\t"
		"xor %%rax, %%rdx\n\t"  "sub %%rdi, %%r8\n\t"    "sbb %%r9, %%r10\n\t"
		"xor %%rsi, %%rdi\n\t"  "add %%r8, %%r9\n\t"     "rol $29, %%r11\n\t"
		"add %%r10, %%r11\n\t"  "xor %%r11, %%r12\n\t"   "adc %%r12, %%r13\n\t"
		"rol $7, %%r14\n\t"     "add %%r13, %%r14\n\t"   "xor %%r14, %%r15\n\t"
		"add %%r15, %%rbp\n\t"  "xor %%rbp, %%rbx\n\t"   "add %%rcx, %%r15\n\t"
		"paddq %%xmm1, %%xmm0\n\t"    "pxor %%xmm0, %%xmm2\n\t"     "paddq %%xmm2, %%xmm3\n\t"
		"pshufd $0x39, %%xmm3, %%xmm3\n\t" "paddq %%xmm3, %%xmm4\n\t" "pxor %%xmm4, %%xmm5\n\t"
		"paddq %%xmm5, %%xmm6\n\t"    "pxor %%xmm6, %%xmm7\n\t"     "paddq %%xmm7, %%xmm8\n\t"
		"pshufd $0x4e, %%xmm8, %%xmm8\n\t" "pxor %%xmm8, %%xmm9\n\t" "paddq %%xmm9, %%xmm10\n\t"
		"pxor %%xmm10, %%xmm11\n\t"   "paddq %%xmm11, %%xmm12\n\t"  "pxor %%xmm12, %%xmm13\n\t"
		"paddq %%xmm13, %%xmm14\n\t"  "pxor %%xmm14, %%xmm15\n\t"   "paddq %%xmm15, %%xmm1\n\t"
		"dec %%rcx\n\t"
		"jnz 1b\n\t"
		"push %%rbp\n\t"
		"mov 8(%%rsp), %%rbp\n\t"   /* the context */
		"mov %%rax, 0(%%rbp)\n\t"   "mov %%rbx, 8(%%rbp)\n\t"   "mov %%rdx, 16(%%rbp)\n\t"
		"mov %%rsi, 24(%%rbp)\n\t"  "mov %%rdi, 32(%%rbp)\n\t"  "mov %%r8, 40(%%rbp)\n\t"
		"mov %%r9, 48(%%rbp)\n\t"   "mov %%r10, 56(%%rbp)\n\t"  "mov %%r11, 64(%%rbp)\n\t"
		"mov %%r12, 72(%%rbp)\n\t"  "mov %%r13, 80(%%rbp)\n\t"  "mov %%r14, 88(%%rbp)\n\t"
		"mov %%r15, 96(%%rbp)\n\t"  "pop %%rcx\n\t"             "mov %%rcx, 104(%%rbp)\n\t"
		"movq $0, 112(%%rbp)\n\t"
		"movdqu %%xmm0, 128(%%rbp)\n\t"   "movdqu %%xmm1, 144(%%rbp)\n\t"
		"movdqu %%xmm2, 160(%%rbp)\n\t"   "movdqu %%xmm3, 176(%%rbp)\n\t"
		"movdqu %%xmm4, 192(%%rbp)\n\t"   "movdqu %%xmm5, 208(%%rbp)\n\t"
		"movdqu %%xmm6, 224(%%rbp)\n\t"   "movdqu %%xmm7, 240(%%rbp)\n\t"
		"movdqu %%xmm8, 256(%%rbp)\n\t"   "movdqu %%xmm9, 272(%%rbp)\n\t"
		"movdqu %%xmm10, 288(%%rbp)\n\t"  "movdqu %%xmm11, 304(%%rbp)\n\t"
		"movdqu %%xmm12, 320(%%rbp)\n\t"  "movdqu %%xmm13, 336(%%rbp)\n\t"
		"movdqu %%xmm14, 352(%%rbp)\n\t"  "movdqu %%xmm15, 368(%%rbp)\n\t"
		"pop %%rdi\n\t"
		"pop %%rbx\n\t"
		"pop %%rbp\n\t"
		"add $128, %%rsp\n\t"
		: "+D"(p)
		:
		: "rax", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
		  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
		  "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
	memcpy(out, ctx, sizeof(ctx));
}

/* One round of the AVX2 computation on ymm0-ymm15 (their upper halves included); `out`
 * gets 64 words. */
static void round_avx2(uint64_t iters, uint64_t *out)
{
	static uint64_t init[64];
	for (int i = 0; i < 64; i++)
		init[i] = mix64((uint64_t)i + 1);
	__asm__ volatile(
		"vmovdqu 0(%[init]), %%ymm0\n\t"    "vmovdqu 32(%[init]), %%ymm1\n\t"
		"vmovdqu 64(%[init]), %%ymm2\n\t"   "vmovdqu 96(%[init]), %%ymm3\n\t"
		"vmovdqu 128(%[init]), %%ymm4\n\t"  "vmovdqu 160(%[init]), %%ymm5\n\t"
		"vmovdqu 192(%[init]), %%ymm6\n\t"  "vmovdqu 224(%[init]), %%ymm7\n\t"
		"vmovdqu 256(%[init]), %%ymm8\n\t"  "vmovdqu 288(%[init]), %%ymm9\n\t"
		"vmovdqu 320(%[init]), %%ymm10\n\t" "vmovdqu 352(%[init]), %%ymm11\n\t"
		"vmovdqu 384(%[init]), %%ymm12\n\t" "vmovdqu 416(%[init]), %%ymm13\n\t"
		"vmovdqu 448(%[init]), %%ymm14\n\t" "vmovdqu 480(%[init]), %%ymm15\n\t"
		"mov %[iters], %%rcx\n\t"
		"2:\n\t"
		"vpaddq %%ymm1, %%ymm0, %%ymm0\n\t"    "vpxor %%ymm0, %%ymm2, %%ymm2\n\t"
		"vpaddq %%ymm2, %%ymm3, %%ymm3\n\t"    "vpermq $0x39, %%ymm3, %%ymm3\n\t"
		"vpaddq %%ymm3, %%ymm4, %%ymm4\n\t"    "vpxor %%ymm4, %%ymm5, %%ymm5\n\t"
		"vpaddq %%ymm5, %%ymm6, %%ymm6\n\t"    "vpxor %%ymm6, %%ymm7, %%ymm7\n\t"
		"vpaddq %%ymm7, %%ymm8, %%ymm8\n\t"    "vpermq $0x4e, %%ymm8, %%ymm8\n\t"
		"vpxor %%ymm8, %%ymm9, %%ymm9\n\t"     "vpaddq %%ymm9, %%ymm10, %%ymm10\n\t"
		"vpxor %%ymm10, %%ymm11, %%ymm11\n\t"  "vpaddq %%ymm11, %%ymm12, %%ymm12\n\t"
		"vpxor %%ymm12, %%ymm13, %%ymm13\n\t"  "vpaddq %%ymm13, %%ymm14, %%ymm14\n\t"
		"vpxor %%ymm14, %%ymm15, %%ymm15\n\t"  "vpaddq %%ymm15, %%ymm1, %%ymm1\n\t"
		"dec %%rcx\n\t"
		"jnz 2b\n\t"
		"vmovdqu %%ymm0, 0(%[out])\n\t"    "vmovdqu %%ymm1, 32(%[out])\n\t"
		"vmovdqu %%ymm2, 64(%[out])\n\t"   "vmovdqu %%ymm3, 96(%[out])\n\t"
		"vmovdqu %%ymm4, 128(%[out])\n\t"  "vmovdqu %%ymm5, 160(%[out])\n\t"
		"vmovdqu %%ymm6, 192(%[out])\n\t"  "vmovdqu %%ymm7, 224(%[out])\n\t"
		"vmovdqu %%ymm8, 256(%[out])\n\t"  "vmovdqu %%ymm9, 288(%[out])\n\t"
		"vmovdqu %%ymm10, 320(%[out])\n\t" "vmovdqu %%ymm11, 352(%[out])\n\t"
		"vmovdqu %%ymm12, 384(%[out])\n\t" "vmovdqu %%ymm13, 416(%[out])\n\t"
		"vmovdqu %%ymm14, 448(%[out])\n\t" "vmovdqu %%ymm15, 480(%[out])\n\t"
		"vzeroupper\n\t"
		:
		: [init] "r"(init), [iters] "r"(iters), [out] "r"(out)
		: "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
		  "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}

static void one_round(uint64_t *out)
{
	memset(out, 0, WORDS * sizeof(uint64_t));
	round_sse(ITERS, out);
	if (use_avx2)
		round_avx2(ITERS / 2, out + 48);
}

static void *spin(void *arg)
{
	struct spinner *s = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);	/* only the main thread takes signals */
	uint64_t out[WORDS];
	for (;;) {
		one_round(out);
		if (corrupt && s->rounds == 3 && s->index == 0)
			out[20] ^= 1ULL << 17;
		for (int w = 0; w < WORDS; w++) {
			if (out[w] != s->reference[w]) {
				if (!s->bad)
					snprintf(s->first_bad, sizeof(s->first_bad),
						 "thread %d: round %llu word %d expected 0x%016llx got 0x%016llx",
						 s->index, (unsigned long long)s->rounds, w,
						 (unsigned long long)s->reference[w], (unsigned long long)out[w]);
				s->bad++;
				break;
			}
		}
		__atomic_add_fetch(&s->rounds, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void check(void)
{
	uint64_t start[MAX_THREADS], total = 0;
	for (int i = 0; i < nthreads; i++)
		start[i] = __atomic_load_n(&spinners[i].rounds, __ATOMIC_ACQUIRE);
	for (int waited = 0;; waited += 50) {
		int done = 1;
		for (int i = 0; i < nthreads; i++)
			done &= __atomic_load_n(&spinners[i].rounds, __ATOMIC_ACQUIRE) >= start[i] + 2;
		if (done)
			break;
		if (waited >= CHECK_DEADLINE_MS) {
			char err[512] = "";
			for (int i = 0; i < nthreads; i++)
				if (spinners[i].rounds < start[i] + 2)
					append(err, sizeof(err), "thread %d made no progress (%llu rounds); ", i,
					       (unsigned long long)spinners[i].rounds);
			say("CHECK FAIL %s", err);
			return;
		}
		sleep_ms(50);
	}
	for (int i = 0; i < nthreads; i++) {
		if (spinners[i].bad) {
			say("CHECK FAIL %s (%llu bad rounds)", spinners[i].first_bad, (unsigned long long)spinners[i].bad);
			return;
		}
		total += spinners[i].rounds;
	}
	say("CHECK OK threads=%d rounds=%llu avx2=%d", nthreads, (unsigned long long)total, use_avx2);
}

int main(int argc, char **argv)
{
	setsid();
	if (argc > 1)
		nthreads = atoi(argv[1]);
	if (nthreads < 1 || nthreads > MAX_THREADS)
		setup_fail("threads must be 1..%d", MAX_THREADS);
	corrupt = getenv("SPINNERS_CORRUPT") != NULL;
	__builtin_cpu_init();
	use_avx2 = __builtin_cpu_supports("avx2") != 0;

	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	uint64_t reference[WORDS];
	one_round(reference);
	for (int i = 0; i < nthreads; i++) {
		spinners[i].index = i;
		memcpy(spinners[i].reference, reference, sizeof(reference));
		if (pthread_create(&spinners[i].thread, NULL, spin, &spinners[i]))
			setup_fail("pthread_create");
	}
	for (int i = 0; i < nthreads; i++)
		while (__atomic_load_n(&spinners[i].rounds, __ATOMIC_ACQUIRE) < 1)
			sleep_ms(20);
	say("READY root=%d threads=%d avx2=%d iters=%lu", getpid(), nthreads, use_avx2, ITERS);
	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		check();
	}
}
