/* cflags: */
/* evfds - one process holding eventfds, a signalfd, timerfds and an epoll set over them.
 *
 *   efd    eventfd(5, EFD_NONBLOCK)
 *   three  eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), then 3 written to it (not EFD_SEMAPHORE:
 *          criu 3.17 restores an eventfd without it, see ovm-offline's refusal of those)
 *   sfd    signalfd for {SIGUSR2, SIGRTMIN+2}, SFD_NONBLOCK; both signals are blocked and
 *          pending (SIGRTMIN+2 queued twice with values 42 and 43)
 *   idle   timerfd on CLOCK_MONOTONIC armed for 600 s with a 2 s interval (does not fire)
 *   fired  timerfd on CLOCK_MONOTONIC that fired once 50 ms in; 300 s interval
 *   abs    timerfd on CLOCK_REALTIME armed TFD_TIMER_ABSTIME for one hour ahead
 *   p[2]   a pipe, empty
 *   ep     epoll over efd (EPOLLIN, 0x1111), sfd (EPOLLIN, 0x2222), p[0] (EPOLLIN|EPOLLET,
 *          0x3333), fired (EPOLLIN, 0x5555) and idle (EPOLLIN|EPOLLONESHOT, 0x4444); efd added
 *          through a dup of it, closed since (zdtm epoll01: the epoll's fd is closed, its file
 *          open at another)
 *
 * Check (SIGUSR1): epoll_wait reports exactly 0x1111, 0x2222 and 0x5555 ready; a byte
 * written to the pipe makes 0x3333 ready too; efd reads 5, three reads 3 then EAGAIN; sfd delivers SIGUSR2 and SIGRTMIN+2 twice with their values; fired reads 1
 * tick; idle and abs are still armed with their intervals. Afterwards it re-arms everything
 * (so a later check passes too).
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK pid=P
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>

static int efd, three, sfd, idle, fired, absfd, p[2], ep;

static void arm(char *err, size_t errsz)
{
	uint64_t v = 5;
	if (write(efd, &v, 8) != 8)
		append(err, errsz, "write efd; ");
	v = 3;
	if (write(three, &v, 8) != 8)
		append(err, errsz, "write three; ");
	union sigval val;
	if (kill(getpid(), SIGUSR2) < 0)
		append(err, errsz, "kill SIGUSR2; ");
	val.sival_int = 42;
	if (sigqueue(getpid(), SIGRTMIN + 2, val) < 0)
		append(err, errsz, "sigqueue 42; ");
	val.sival_int = 43;
	if (sigqueue(getpid(), SIGRTMIN + 2, val) < 0)
		append(err, errsz, "sigqueue 43; ");
	struct itimerspec it = { .it_interval = { 2, 0 }, .it_value = { 600, 0 } };
	if (timerfd_settime(idle, 0, &it, NULL) < 0)
		append(err, errsz, "arm idle; ");
	struct itimerspec f = { .it_interval = { 300, 0 }, .it_value = { 0, 50000000 } };
	if (timerfd_settime(fired, 0, &f, NULL) < 0)
		append(err, errsz, "arm fired; ");
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct itimerspec a = { .it_interval = { 7, 0 }, .it_value = { now.tv_sec + 3600, 0 } };
	if (timerfd_settime(absfd, TFD_TIMER_ABSTIME, &a, NULL) < 0)
		append(err, errsz, "arm abs; ");
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = 0x4444 };
	if (epoll_ctl(ep, EPOLL_CTL_MOD, idle, &ev) < 0)
		append(err, errsz, "re-arm idle in epoll; ");
	sleep_ms_full(100);	/* let `fired` fire */
}

static uint64_t ready_set(int timeout_ms)
{
	struct epoll_event evs[8];
	int n = epoll_wait(ep, evs, 8, timeout_ms);
	uint64_t set = 0;
	for (int i = 0; i < n; i++)
		set |= 1ull << ((evs[i].data.u64 >> 12) & 0xf);	/* 0x1111 -> bit 1, ... */
	for (int i = 0; i < n; i++)
		if ((evs[i].data.u64 & 0xfff) != (evs[i].data.u64 >> 12) * 0x111)
			set |= 1ull << 15;
	return set;
}

static void check(char *err, size_t errsz)
{
	uint64_t set = ready_set(0);
	if (set != ((1 << 1) | (1 << 2) | (1 << 5)))
		append(err, errsz, "epoll ready set 0x%llx, wanted 0x26; ", (unsigned long long)set);
	if (write(p[1], "x", 1) != 1)
		append(err, errsz, "pipe write; ");
	set = ready_set(0);
	if (!(set & (1 << 3)))
		append(err, errsz, "epoll missed the pipe (0x%llx); ", (unsigned long long)set);
	char c;
	if (read(p[0], &c, 1) != 1)
		append(err, errsz, "pipe read; ");
	uint64_t v = 0;
	if (read(efd, &v, 8) != 8 || v != 5)
		append(err, errsz, "efd read %llu, wanted 5; ", (unsigned long long)v);
	if (read(three, &v, 8) != 8 || v != 3)
		append(err, errsz, "three read %llu, wanted 3; ", (unsigned long long)v);
	if (read(three, &v, 8) != -1 || errno != EAGAIN)
		append(err, errsz, "three not empty after one read; ");
	struct signalfd_siginfo si[4];
	ssize_t r = read(sfd, si, sizeof(si));
	int n = r > 0 ? (int)(r / sizeof(si[0])) : 0;
	int usr2 = 0, rt = 0;
	for (int i = 0; i < n; i++) {
		if (si[i].ssi_signo == SIGUSR2)
			usr2++;
		else if ((int)si[i].ssi_signo == SIGRTMIN + 2 && si[i].ssi_int == 42 + rt)
			rt++;
	}
	r = read(sfd, si, sizeof(si));
	if (usr2 != 1 || rt != 2 || r != -1)
		append(err, errsz, "signalfd gave %d signals: SIGUSR2 x%d, SIGRTMIN+2 in order x%d; ", n, usr2, rt);
	if (read(fired, &v, 8) != 8 || v != 1)
		append(err, errsz, "fired timer ticks %llu, wanted 1; ", (unsigned long long)v);
	struct itimerspec it;
	if (timerfd_gettime(idle, &it) < 0 || it.it_interval.tv_sec != 2 || it.it_value.tv_sec > 600 ||
	    (it.it_value.tv_sec == 0 && it.it_value.tv_nsec == 0))
		append(err, errsz, "idle timer not armed as set; ");
	if (timerfd_gettime(absfd, &it) < 0 || it.it_interval.tv_sec != 7 || it.it_value.tv_sec > 3600 ||
	    it.it_value.tv_sec < 3000)
		append(err, errsz, "abs timer %lld s away, interval %lld; ", (long long)it.it_value.tv_sec,
		       (long long)it.it_interval.tv_sec);
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask, sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGUSR2);
	sigaddset(&sigs, SIGRTMIN + 2);
	usr1_setup(&blocked, &waitmask, &sigs);

	efd = eventfd(0, EFD_NONBLOCK);
	three = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	sfd = signalfd(-1, &sigs, SFD_NONBLOCK);
	idle = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	fired = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	absfd = timerfd_create(CLOCK_REALTIME, 0);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (efd < 0 || three < 0 || sfd < 0 || idle < 0 || fired < 0 || absfd < 0 || ep < 0 ||
	    pipe2(p, O_NONBLOCK) < 0)
		setup_fail("creating the fds");
	int efd_dup = dup(efd);
	if (efd_dup < 0)
		setup_fail("dup efd");
	struct { int fd; uint32_t events; uint64_t data; } watch[] = {
		{ efd_dup, EPOLLIN, 0x1111 }, { sfd, EPOLLIN, 0x2222 }, { p[0], EPOLLIN | EPOLLET, 0x3333 },
		{ idle, EPOLLIN | EPOLLONESHOT, 0x4444 }, { fired, EPOLLIN, 0x5555 },
	};
	for (unsigned i = 0; i < sizeof(watch) / sizeof(watch[0]); i++) {
		struct epoll_event ev = { .events = watch[i].events, .data.u64 = watch[i].data };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, watch[i].fd, &ev) < 0)
			setup_fail("epoll_ctl add %d", watch[i].fd);
	}
	close(efd_dup);
	char err[2048] = "";
	arm(err, sizeof(err));
	if (err[0])
		setup_fail("%s", err);
	say("READY pid=%d", (int)getpid());

	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		err[0] = 0;
		check(err, sizeof(err));
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK pid=%d", (int)getpid());
		err[0] = 0;
		arm(err, sizeof(err));
		if (err[0])
			say("re-arm failed: %s", err);
	}
}
