/* cflags: */
/* fanotify - one process holding three fanotify instances over files in /run/ovm/fanotify/ (a
 * tmpfs; the state of CRIU's zdtm fanotify00, set up by our own code).
 *
 *   fan    fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK | FAN_CLOEXEC, O_RDONLY | O_LARGEFILE):
 *          a mark on a (FAN_MODIFY | FAN_CLOSE_WRITE), one on the directory (FAN_OPEN |
 *          FAN_EVENT_ON_CHILD), and one on b ignoring FAN_OPEN with FAN_MARK_IGNORED_SURV_MODIFY
 *   fan2   fanotify_init(FAN_CLASS_NOTIF | FAN_UNLIMITED_QUEUE, O_RDONLY): a mark on b
 *          (FAN_CLOSE_NOWRITE)
 *   fan3   fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK, O_RDONLY): a mount mark (FAN_MARK_MOUNT,
 *          FAN_CLOSE_WRITE) on a tmpfs of its own mounted at mnt/ (the restoring guest mounts
 *          one there before criu's restore, which marks the mount it finds at that path)
 * Every event of the setup is read before READY: nothing is queued at the dump.
 *
 * Check (SIGUSR1): neither instance has an event queued; then appending to a and to b, reading
 * b and reading c give, merged by file: on fan, a: FAN_OPEN|FAN_MODIFY|FAN_CLOSE_WRITE and c:
 * FAN_OPEN, nothing of b (its opens ignored, and the ignoring survives b's modification); on
 * fan2, b: FAN_CLOSE_NOWRITE; then appending to mnt/m and to a gives on fan3 m: FAN_CLOSE_WRITE
 * alone (a is outside the mount). Each event names this process.
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK pid=P
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/fanotify.h>
#include <sys/mount.h>

static const char *dir;
static int fan, fan2, fan3;

static void path_of(char *out, size_t size, const char *name)
{
	if (snprintf(out, size, "%s%s%s", dir, *name ? "/" : "", name) >= (int)size)
		setup_fail("path of %s too long", name);
}

static int mark(int fd, unsigned flags, uint64_t mask, const char *name)
{
	char path[4096];
	path_of(path, sizeof(path), name);
	return fanotify_mark(fd, FAN_MARK_ADD | flags, mask, AT_FDCWD, path);
}

/* Append a byte to name (one open for write) or read one (one open for read). */
static int touch(const char *name, int append_byte)
{
	char path[4096], c = 'x';
	path_of(path, sizeof(path), name);
	int fd = open(path, append_byte ? O_WRONLY | O_CREAT | O_APPEND : O_RDONLY, 0644);
	if (fd < 0)
		return -1;
	int ok = append_byte ? write(fd, &c, 1) == 1 : read(fd, &c, 1) == 1;
	close(fd);
	return ok ? 0 : -1;
}

/* Every event queued on fd, merged by file name: "a:0x..., c:0x..." in the order first met;
 * an event of another process, or on no file, is said as such. */
static void events(int fd, char *out, size_t size)
{
	char names[8][64];
	uint64_t masks[8];
	int n = 0;
	char buf[4096] __attribute__((aligned(8)));
	out[0] = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 0) != 1)
			break;
		ssize_t len = read(fd, buf, sizeof(buf));
		if (len <= 0)
			break;
		for (struct fanotify_event_metadata *ev = (void *)buf; FAN_EVENT_OK(ev, len); ev = FAN_EVENT_NEXT(ev, len)) {
			char link[64], target[4096] = "?";
			if (ev->fd >= 0) {
				snprintf(link, sizeof(link), "/proc/self/fd/%d", ev->fd);
				ssize_t t = readlink(link, target, sizeof(target) - 1);
				target[t > 0 ? t : 0] = 0;
				close(ev->fd);
			}
			if (ev->pid != getpid())
				append(out, size, "an event of pid %d; ", (int)ev->pid);
			const char *base = strrchr(target, '/');
			base = base ? base + 1 : target;
			int i = 0;
			while (i < n && strcmp(names[i], base))
				i++;
			if (i == n && n < 8) {
				snprintf(names[n], sizeof(names[n]), "%s", base);
				masks[n++] = 0;
			}
			if (i < n)
				masks[i] |= ev->mask;
		}
	}
	for (int i = 0; i < n; i++)
		append(out, size, "%s%s:0x%llx", i ? ", " : "", names[i], (unsigned long long)masks[i]);
}

static void expect(char *err, size_t errsz, int fd, const char *which, const char *wanted)
{
	char got[2048];
	events(fd, got, sizeof(got));
	expect_text(err, errsz, which, got, wanted);
}

static void check(char *err, size_t errsz)
{
	expect(err, errsz, fan, "fan before", "");
	expect(err, errsz, fan2, "fan2 before", "");
	if (touch("a", 1) < 0 || touch("b", 1) < 0 || touch("b", 0) < 0 || touch("c", 0) < 0)
		append(err, errsz, "touching the files; ");
	char wanted[256];
	snprintf(wanted, sizeof(wanted), "a:0x%x, c:0x%x", FAN_OPEN | FAN_MODIFY | FAN_CLOSE_WRITE, FAN_OPEN);
	expect(err, errsz, fan, "fan", wanted);
	snprintf(wanted, sizeof(wanted), "b:0x%x", FAN_CLOSE_NOWRITE);
	expect(err, errsz, fan2, "fan2", wanted);
	expect(err, errsz, fan3, "fan3 before", "");
	if (touch("mnt/m", 1) < 0 || touch("a", 1) < 0)
		append(err, errsz, "touching mnt/m and a; ");
	snprintf(wanted, sizeof(wanted), "m:0x%x", FAN_CLOSE_WRITE);
	expect(err, errsz, fan3, "fan3", wanted);
	events(fan, wanted, sizeof(wanted));  /* a's, made for fan3's sake */
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	dir = work_dir("fanotify");
	if (touch("a", 1) < 0 || touch("b", 1) < 0 || touch("c", 1) < 0)
		setup_fail("creating the files");

	char mnt[4096];
	path_of(mnt, sizeof(mnt), "mnt");
	if ((mkdir(mnt, 0755) < 0 && errno != EEXIST) || mount("none", mnt, "tmpfs", 0, "size=64k") < 0)
		setup_fail("mount a tmpfs on %s", mnt);

	fan = fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK | FAN_CLOEXEC, O_RDONLY | O_LARGEFILE);
	fan2 = fanotify_init(FAN_CLASS_NOTIF | FAN_UNLIMITED_QUEUE, O_RDONLY);
	fan3 = fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK, O_RDONLY);
	if (fan < 0 || fan2 < 0 || fan3 < 0)
		setup_fail("fanotify_init");
	if (mark(fan, 0, FAN_MODIFY | FAN_CLOSE_WRITE, "a") < 0 || mark(fan, 0, FAN_OPEN | FAN_EVENT_ON_CHILD, "") < 0 ||
	    mark(fan, FAN_MARK_IGNORED_MASK | FAN_MARK_IGNORED_SURV_MODIFY, FAN_OPEN, "b") < 0 ||
	    mark(fan2, 0, FAN_CLOSE_NOWRITE, "b") < 0 || mark(fan3, FAN_MARK_MOUNT, FAN_CLOSE_WRITE, "mnt") < 0)
		setup_fail("fanotify_mark");
	char drained[2048];
	touch("a", 1);
	events(fan, drained, sizeof(drained));
	events(fan2, drained, sizeof(drained));
	events(fan3, drained, sizeof(drained));
	say("READY pid=%d", (int)getpid());
	char ok[64];
	snprintf(ok, sizeof(ok), "CHECK OK pid=%d", (int)getpid());
	serve_checks(&blocked, &waitmask, check, ok);
}
