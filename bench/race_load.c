/* race-load: the other work in bench_race.py's guest (OVmigrate's four loads), counting what it
 * gets done in a shared counter, so the host can tell how much a save slows it.
 *
 *   race-load cpu|pipe|disk|fs COUNTER [DEVICE]   run the load (disk: DEVICE, written O_DIRECT)
 *   race-load count COUNTER                        print the counter
 *   race-load now                                  print CLOCK_MONOTONIC in nanoseconds
 *
 * cpu: a spinning thread per online CPU, one count per 2^16 rounds of arithmetic;
 * pipe: a byte ping-ponged between two processes, one count per round trip;
 * disk: 64 KiB direct writes cycling over the first 256 MiB of DEVICE, one count each;
 * fs: a 4 KiB file created, written, closed and unlinked in the current directory, one count each.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static uint64_t *counter;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static uint64_t *map_counter(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	if (fd < 0 || ftruncate(fd, sizeof(uint64_t)) < 0)
		die(path);
	void *p = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

static void count(void) { __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

static void *spin(void *arg)
{
	volatile uint64_t x = (uintptr_t)arg + 1;
	for (;;) {
		for (int i = 0; i < 1 << 16; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		count();
	}
	return NULL;
}

static void cpu_load(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	for (long i = 1; i < cpus; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, spin, (void *)(uintptr_t)i))
			die("pthread_create");
	}
	spin(NULL);
}

static void pipe_load(void)
{
	int there[2], back[2];
	char byte = 0;
	if (pipe(there) || pipe(back))
		die("pipe");
	if (fork() == 0) {
		for (;;) {
			if (read(there[0], &byte, 1) != 1 || write(back[1], &byte, 1) != 1)
				_exit(0);
		}
	}
	for (;;) {
		if (write(there[1], &byte, 1) != 1 || read(back[0], &byte, 1) != 1)
			die("ping-pong");
		count();
	}
}

static void disk_load(const char *device)
{
	const size_t block = 64 << 10, span = 256 << 20;
	int fd = open(device, O_WRONLY | O_DIRECT);
	void *buffer;
	if (fd < 0)
		die(device);
	if (posix_memalign(&buffer, 4096, block))
		die("posix_memalign");
	memset(buffer, 0x5a, block);
	for (off_t at = 0;; at = (at + block) % span) {
		if (pwrite(fd, buffer, block, at) != (ssize_t)block)
			die("pwrite");
		count();
	}
}

static void fs_load(void)
{
	char data[4096], name[64];
	memset(data, 0xa5, sizeof data);
	for (uint64_t i = 0;; i++) {
		snprintf(name, sizeof name, "race-file-%llu", (unsigned long long)(i % 64));
		int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, data, sizeof data) != (ssize_t)sizeof data || close(fd) || unlink(name))
			die(name);
		count();
	}
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "now")) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		printf("%llu\n", (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec);
		return 0;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: race-load cpu|pipe|disk|fs|count COUNTER [DEVICE] | race-load now\n");
		return 2;
	}
	counter = map_counter(argv[2]);
	if (!strcmp(argv[1], "count")) {
		printf("%llu\n", (unsigned long long)__atomic_load_n(counter, __ATOMIC_RELAXED));
		return 0;
	}
	if (!strcmp(argv[1], "cpu"))
		cpu_load();
	else if (!strcmp(argv[1], "pipe"))
		pipe_load();
	else if (!strcmp(argv[1], "disk") && argc == 4)
		disk_load(argv[3]);
	else if (!strcmp(argv[1], "fs"))
		fs_load();
	fprintf(stderr, "race-load: unknown load %s\n", argv[1]);
	return 2;
}
