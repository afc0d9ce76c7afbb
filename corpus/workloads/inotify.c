/* cflags: */
/* inotify - one process holding two inotify instances over files in /run/ovm/inotify/ (a
 * tmpfs; the state of CRIU's zdtm inotify00, set up by our own code).
 *
 *   in     inotify_init1(IN_NONBLOCK): wd 1 on watched/ (IN_CREATE|IN_DELETE|IN_MOVED_TO),
 *          wd 2 on a (IN_MODIFY|IN_CLOSE_WRITE), wd 3 on b (IN_ATTRIB, removed since), wd 4 on
 *          c (IN_OPEN|IN_ACCESS); its next watch descriptor is 5
 *   in2    inotify_init1(IN_CLOEXEC): wd 1 on a (IN_ALL_EVENTS)
 * Every event of the setup is read before READY: nothing is queued at the dump.
 *
 * Check (SIGUSR1): neither instance has an event queued; then creating watched/new, appending
 * to a, opening and reading c, changing b's mode and unlinking watched/new give, on in,
 * exactly: 1 IN_CREATE new, 2 IN_MODIFY, 2 IN_CLOSE_WRITE, 4 IN_OPEN, 4 IN_ACCESS, 1 IN_DELETE
 * new (nothing for b, whose watch was removed) and, on in2: 1 IN_OPEN, 1 IN_MODIFY,
 * 1 IN_CLOSE_WRITE. A new watch on b then gets the next watch descriptor (5 at the first
 * check) and is removed again.
 *
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK pid=P
 *              CHECK FAIL <what>[; <what>...]
 */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>

static const char *dir;
static int in, in2, next_wd;

static void path_of(char *out, size_t size, const char *name)
{
	if (snprintf(out, size, "%s/%s", dir, name) >= (int)size)
		setup_fail("path of %s too long", name);
}

static int watch(int fd, const char *name, uint32_t mask)
{
	char path[4096];
	path_of(path, sizeof(path), name);
	return inotify_add_watch(fd, path, mask);
}

static void touch(const char *name)
{
	char path[4096];
	path_of(path, sizeof(path), name);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd < 0 || write(fd, "x", 1) != 1)
		setup_fail("create %s", name);
	close(fd);
}

/* Every event queued on fd, as "wd NAME[ name]" words: the reader waits for none */
static void events(int fd, char *out, size_t size)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	static const struct { uint32_t bit; const char *name; } names[] = {
		{ IN_ACCESS, "IN_ACCESS" }, { IN_MODIFY, "IN_MODIFY" }, { IN_ATTRIB, "IN_ATTRIB" },
		{ IN_CLOSE_WRITE, "IN_CLOSE_WRITE" }, { IN_CLOSE_NOWRITE, "IN_CLOSE_NOWRITE" },
		{ IN_OPEN, "IN_OPEN" }, { IN_MOVED_FROM, "IN_MOVED_FROM" }, { IN_MOVED_TO, "IN_MOVED_TO" },
		{ IN_CREATE, "IN_CREATE" }, { IN_DELETE, "IN_DELETE" }, { IN_IGNORED, "IN_IGNORED" },
	};
	out[0] = 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 0) != 1)
			return;
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return;
		for (char *at = buf; at < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)at;
			for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
				if (ev->mask & names[i].bit)
					append(out, size, "%s%d %s%s%s", out[0] ? ", " : "", ev->wd, names[i].name,
					       ev->len ? " " : "", ev->len ? ev->name : "");
			at += sizeof(*ev) + ev->len;
		}
	}
}

static void expect(char *err, size_t errsz, int fd, const char *which, const char *wanted)
{
	char got[2048];
	events(fd, got, sizeof(got));
	expect_text(err, errsz, which, got, wanted);
}

static void check(char *err, size_t errsz)
{
	expect(err, errsz, in, "in before", "");
	expect(err, errsz, in2, "in2 before", "");
	touch("watched/new");
	touch("a");
	char path[4096], c;
	path_of(path, sizeof(path), "c");
	int fd = open(path, O_RDONLY);
	if (fd < 0 || read(fd, &c, 1) != 1)
		append(err, errsz, "reading c; ");
	if (fd >= 0)
		close(fd);
	path_of(path, sizeof(path), "b");
	if (chmod(path, 0600) < 0 || chmod(path, 0644) < 0)
		append(err, errsz, "chmod b; ");
	path_of(path, sizeof(path), "watched/new");
	if (unlink(path) < 0)
		append(err, errsz, "unlink watched/new; ");
	expect(err, errsz, in, "in",
	       "1 IN_CREATE new, 2 IN_MODIFY, 2 IN_CLOSE_WRITE, 4 IN_OPEN, 4 IN_ACCESS, 1 IN_DELETE new");
	expect(err, errsz, in2, "in2", "1 IN_OPEN, 1 IN_MODIFY, 1 IN_CLOSE_WRITE");
	int wd = watch(in, "b", IN_ATTRIB);
	if (wd != next_wd)
		append(err, errsz, "a new watch got wd %d, wanted %d; ", wd, next_wd);
	if (wd >= 0 && inotify_rm_watch(in, wd) < 0)
		append(err, errsz, "removing wd %d; ", wd);
	next_wd = wd + 1;
	char ignored[64];
	snprintf(ignored, sizeof(ignored), "%d IN_IGNORED", wd);
	expect(err, errsz, in, "in after the new watch", ignored);
}

int main(void)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);
	dir = work_dir("inotify");
	char path[4096];
	path_of(path, sizeof(path), "watched");
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		setup_fail("mkdir watched");
	touch("a");
	touch("b");
	touch("c");

	in = inotify_init1(IN_NONBLOCK);
	in2 = inotify_init1(IN_CLOEXEC);
	if (in < 0 || in2 < 0)
		setup_fail("inotify_init1");
	int wds[] = {
		watch(in, "watched", IN_CREATE | IN_DELETE | IN_MOVED_TO),
		watch(in, "a", IN_MODIFY | IN_CLOSE_WRITE),
		watch(in, "b", IN_ATTRIB),
		watch(in, "c", IN_OPEN | IN_ACCESS),
		watch(in2, "a", IN_ALL_EVENTS),
	};
	if (wds[0] != 1 || wds[1] != 2 || wds[2] != 3 || wds[3] != 4 || wds[4] != 1)
		setup_fail("watch descriptors %d %d %d %d %d", wds[0], wds[1], wds[2], wds[3], wds[4]);
	if (inotify_rm_watch(in, wds[2]) < 0)
		setup_fail("inotify_rm_watch");
	next_wd = 5;
	touch("a");
	char drained[2048];
	events(in, drained, sizeof(drained));
	events(in2, drained, sizeof(drained));
	say("READY pid=%d", (int)getpid());
	char ok[64];
	snprintf(ok, sizeof(ok), "CHECK OK pid=%d", (int)getpid());
	serve_checks(&blocked, &waitmask, check, ok);
}
