/* cflags: -pthread */
/* inet - the IPv4/IPv6 sockets a server holds before any client comes: TCP listeners
 * (IPv4, IPv6-only, dual-stack), a TCP socket bound and not listening, one not bound at all,
 * UDP sockets bound, connected and unbound, with datagrams queued on one of them.
 *
 * After a restore every socket must be what it was: bound to the same address and port, with
 * the options set here (SO_REUSEADDR, SO_RCVBUF, SO_KEEPALIVE, IPV6_V6ONLY, IP_FREEBIND,
 * SO_BROADCAST, SO_BINDTODEVICE "lo" (zdtm sock_opts01), O_NONBLOCK), each listener accepting a new client and carrying bytes both
 * ways, the bound socket listening on its port when asked to, the unbound one connecting, the
 * connected UDP socket still talking to its peer. The datagrams queued on the UDP server when
 * it was saved may be gone (criu drops them; UDP may lose them anyway) but nothing arrives
 * twice or out of order.
 *
 * With `established`, it also holds TCP connections, each end's bytes checked after a restore:
 *  - both ends of one over 127.0.0.1 to the IPv4 listener, with bytes unread each way ("hello"
 *    towards the server end, "world" towards the client end);
 *  - both ends of one over [::1] to the IPv6 listener whose reader never read: the writer wrote
 *    a numbered byte pattern until its send buffer was full too, so bytes sit unread at the
 *    reader, sent and unacknowledged or not sent at all at the writer (small buffers keep it
 *    to a few hundred KiB); after the restore the reader must read exactly those bytes;
 *  - the server end of one whose client is a process outside the dumped tree (an orphan of
 *    its own session), with "outside" sent by that client and unread: after a restore in a
 *    fresh guest the client is gone, but those bytes must still be there to read (not made
 *    when inet is a PID namespace's init, as in runc-inet: an orphan would be its child).
 * criu dumps them with --tcp-established.
 *
 * With `stream`, a writer thread sends a numbered byte pattern over 127.0.0.1 as fast as it
 * can (writes of 3000 bytes) to a reader thread that reads 1000 bytes every 2 ms and checks
 * each: a slow client. Paused at any moment, both queues are full and the writer is asleep
 * in write() for room, often with part of its bytes moved already. The check drains the
 * queues and wants every byte written before it once and in order, and the stream moving.
 * With `bursts`, the writer sends 64 KiB every 5 ms to a reader that keeps up: mostly both
 * threads sleep with the queues empty, now and then bytes are on their way.
 *
 * Usage:  inet [established | stream | bursts]
 * READY line:  READY pid=P
 * CHECK line:  CHECK OK pid=P  |  CHECK FAIL <what>[; <what>...]
 */
#include "common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <pthread.h>

#define PORT_L4 7101	/* TCP listener on 127.0.0.1 */
#define PORT_L6 7102	/* TCP listener on [::], IPV6_V6ONLY */
#define PORT_DUAL 7103	/* TCP listener on [::], dual-stack */
#define PORT_BOUND 7104	/* TCP bound to 127.0.0.1, not listening */
#define PORT_U4 7105	/* UDP server on 127.0.0.1 */
#define PORT_U6C 7106	/* UDP on [::1], connected to PORT_U6 */
#define PORT_U6 7107	/* UDP on [::1], IPV6_V6ONLY */
#define QUEUED 3	/* datagrams left unread on the UDP server */

static int l4, l6, dual, bound, fresh, u4, u6c, u6, ufresh;
static int rcvbuf_l4, fresh_used, next_seq = 100;
static int est_client = -1, est_server = -1, est_checked;
static int bulk_writer = -1, bulk_reader = -1, outside = -1;
static long bulk_written, bulk_read;
#define BULK_BUF 16384	/* SO_RCVBUF of the bulk reader (the kernel doubles it) */
/* SO_SNDBUF of the bulk writer: its queue must outgrow the window the reader announced
 * before its SO_RCVBUF (at the SYN, from the default buffer: up to 64 KiB), so that some
 * bytes never leave it. With BULK_BUF here too, the queue held 55-61 KiB, how much depending
 * on how writes fell into skbs, and on 6.1 it was sometimes sent whole. */
#define BULK_WRITER_BUF (4 * BULK_BUF)

static unsigned char pattern(long i)
{
	return (unsigned char)(i * 7 + i / 251);
}

static struct sockaddr_in v4(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static struct sockaddr_in6 v6(const char *ip, int port)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	inet_pton(AF_INET6, ip, &a.sin6_addr);
	return a;
}

static int opt(int fd, int level, int name, int value)
{
	return setsockopt(fd, level, name, &value, sizeof(value));
}

static int getopt_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);
	return getsockopt(fd, level, name, &v, &len) < 0 ? -1 : v;
}

static int sock_bound(int family, int type, const void *addr, socklen_t len, int v6only)
{
	int fd = socket(family, type, 0);
	if (fd < 0)
		setup_fail("socket(%d, %d)", family, type);
	if (v6only >= 0 && opt(fd, IPPROTO_IPV6, IPV6_V6ONLY, v6only) < 0)
		setup_fail("IPV6_V6ONLY");
	if (addr && bind(fd, addr, len) < 0)
		setup_fail("bind socket %d", fd);
	return fd;
}

/* The port a socket is bound to (and, for IPv4, its address), -1 on error. */
static int port_of(int fd, uint32_t *ip4)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET) {
		if (ip4)
			*ip4 = ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr);
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	}
	return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int wait_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1;
}

/* A new client connects to `listener` through `addr`; both ends carry a few bytes. */
static void serve_one(char *err, size_t errsz, const char *what, int listener, int client, const void *addr,
		      socklen_t len)
{
	char buf[16] = "";
	if (client < 0 || connect(client, addr, len) < 0) {
		append(err, errsz, "%s: connect: %s; ", what, strerror(errno));
		if (client >= 0)
			close(client);
		return;
	}
	if (!wait_readable(listener, 2000)) {
		append(err, errsz, "%s: no connection to accept; ", what);
		close(client);
		return;
	}
	int conn = accept(listener, NULL, NULL);
	if (conn < 0 || write(client, "ping", 4) != 4 || !wait_readable(conn, 2000) || read(conn, buf, 4) != 4 ||
	    memcmp(buf, "ping", 4) != 0 || write(conn, "pong", 4) != 4 || !wait_readable(client, 2000) ||
	    read(client, buf, 4) != 4 || memcmp(buf, "pong", 4) != 0)
		append(err, errsz, "%s: accepted connection does not carry bytes; ", what);
	if (conn >= 0)
		close(conn);
	close(client);
}

static void check_options(char *err, size_t errsz)
{
	uint32_t ip = 0;
	if (port_of(l4, &ip) != PORT_L4 || ip != INADDR_LOOPBACK)
		append(err, errsz, "l4 bound to %08x:%d; ", ip, port_of(l4, NULL));
	if (port_of(l6, NULL) != PORT_L6 || port_of(dual, NULL) != PORT_DUAL)
		append(err, errsz, "IPv6 listeners on ports %d, %d; ", port_of(l6, NULL), port_of(dual, NULL));
	if (port_of(bound, &ip) != PORT_BOUND || ip != INADDR_LOOPBACK)
		append(err, errsz, "bound socket on %08x:%d; ", ip, port_of(bound, NULL));
	if (port_of(u4, NULL) != PORT_U4 || port_of(u6c, NULL) != PORT_U6C || port_of(u6, NULL) != PORT_U6)
		append(err, errsz, "UDP sockets on ports %d, %d, %d; ", port_of(u4, NULL), port_of(u6c, NULL),
		       port_of(u6, NULL));
	if (getopt_int(l4, SOL_SOCKET, SO_REUSEADDR) != 1 || getopt_int(l4, SOL_SOCKET, SO_RCVBUF) != rcvbuf_l4)
		append(err, errsz, "l4 SO_REUSEADDR %d SO_RCVBUF %d (was %d); ", getopt_int(l4, SOL_SOCKET, SO_REUSEADDR),
		       getopt_int(l4, SOL_SOCKET, SO_RCVBUF), rcvbuf_l4);
	if (getopt_int(l6, IPPROTO_IPV6, IPV6_V6ONLY) != 1 || getopt_int(dual, IPPROTO_IPV6, IPV6_V6ONLY) != 0 ||
	    getopt_int(u6, IPPROTO_IPV6, IPV6_V6ONLY) != 1)
		append(err, errsz, "IPV6_V6ONLY %d/%d/%d; ", getopt_int(l6, IPPROTO_IPV6, IPV6_V6ONLY),
		       getopt_int(dual, IPPROTO_IPV6, IPV6_V6ONLY), getopt_int(u6, IPPROTO_IPV6, IPV6_V6ONLY));
	if (getopt_int(l6, SOL_SOCKET, SO_KEEPALIVE) != 1)
		append(err, errsz, "l6 lost SO_KEEPALIVE; ");
	if (getopt_int(bound, IPPROTO_IP, IP_FREEBIND) != 1)
		append(err, errsz, "bound socket lost IP_FREEBIND; ");
	if (getopt_int(u4, SOL_SOCKET, SO_BROADCAST) != 1)
		append(err, errsz, "u4 lost SO_BROADCAST; ");
	char dev[IFNAMSIZ] = "";
	socklen_t devlen = sizeof(dev);
	if (getsockopt(u4, SOL_SOCKET, SO_BINDTODEVICE, dev, &devlen) < 0 || strcmp(dev, "lo"))
		append(err, errsz, "u4 bound to device '%s', not lo; ", dev);
	if (!(fcntl(ufresh, F_GETFL) & O_NONBLOCK) || port_of(ufresh, NULL) != 0)
		append(err, errsz, "unbound UDP socket: flags %x port %d; ", fcntl(ufresh, F_GETFL), port_of(ufresh, NULL));
	if (!fresh_used && port_of(fresh, NULL) != 0)
		append(err, errsz, "unbound TCP socket on port %d; ", port_of(fresh, NULL));
	struct sockaddr_in6 peer;
	socklen_t len = sizeof(peer);
	if (getpeername(u6c, (struct sockaddr *)&peer, &len) < 0 || ntohs(peer.sin6_port) != PORT_U6)
		append(err, errsz, "connected UDP socket lost its peer; ");
}

static void check_traffic(char *err, size_t errsz)
{
	struct sockaddr_in a4 = v4("127.0.0.1", PORT_L4), ad = v4("127.0.0.1", PORT_DUAL);
	struct sockaddr_in ab = v4("127.0.0.1", PORT_BOUND), au = v4("127.0.0.1", PORT_U4);
	struct sockaddr_in6 a6 = v6("::1", PORT_L6);
	serve_one(err, errsz, "l4", l4, socket(AF_INET, SOCK_STREAM, 0), &a4, sizeof(a4));
	serve_one(err, errsz, "l6", l6, socket(AF_INET6, SOCK_STREAM, 0), &a6, sizeof(a6));
	serve_one(err, errsz, "dual-stack via IPv4", dual, socket(AF_INET, SOCK_STREAM, 0), &ad, sizeof(ad));
	if (listen(bound, 4) < 0)
		append(err, errsz, "listen on the bound socket: %s; ", strerror(errno));
	else
		serve_one(err, errsz, "bound", bound, socket(AF_INET, SOCK_STREAM, 0), &ab, sizeof(ab));
	if (!fresh_used) {
		fresh_used = 1;
		serve_one(err, errsz, "unbound TCP", l6, fresh, &a6, sizeof(a6));
	}

	/* the UDP server: whatever of the queued datagrams survived, in order, then the new one */
	int seq = next_seq++, sender = socket(AF_INET, SOCK_DGRAM, 0);
	if (sender < 0 || sendto(sender, &seq, sizeof(seq), 0, (struct sockaddr *)&au, sizeof(au)) != sizeof(seq))
		append(err, errsz, "sendto u4: %s; ", strerror(errno));
	if (sender >= 0)
		close(sender);
	int last = 0, got_new = 0, v;
	while (!got_new && wait_readable(u4, 2000) && recv(u4, &v, sizeof(v), 0) == sizeof(v)) {
		if (v <= last || (v > QUEUED && v != seq)) {
			append(err, errsz, "u4 received datagram %d after %d; ", v, last);
			break;
		}
		last = v;
		got_new = v == seq;
	}
	if (!got_new)
		append(err, errsz, "u4 never received datagram %d; ", seq);

	/* the connected pair, both ways */
	struct sockaddr_in6 from;
	socklen_t flen = sizeof(from);
	if (send(u6c, &seq, sizeof(seq), 0) != sizeof(seq) || !wait_readable(u6, 2000) ||
	    recvfrom(u6, &v, sizeof(v), 0, (struct sockaddr *)&from, &flen) != sizeof(v) || v != seq ||
	    ntohs(from.sin6_port) != PORT_U6C)
		append(err, errsz, "u6c -> u6 lost datagram %d; ", seq);
	else if (sendto(u6, &seq, sizeof(seq), 0, (struct sockaddr *)&from, flen) != sizeof(seq) ||
		 !wait_readable(u6c, 2000) || recv(u6c, &v, sizeof(v), 0) != sizeof(v) || v != seq)
		append(err, errsz, "u6 -> u6c lost datagram %d; ", seq);
}

/* The established pair: the bytes left unread at the snapshot arrive first, once, and the
 * connection goes on carrying bytes both ways. */
static void check_established(char *err, size_t errsz)
{
	char buf[8] = "";
	if (!est_checked) {
		est_checked = 1;
		if (!wait_readable(est_server, 2000) || read(est_server, buf, 5) != 5 || memcmp(buf, "hello", 5) != 0)
			append(err, errsz, "server end lost the unread \"hello\" (got \"%.5s\"); ", buf);
		if (!wait_readable(est_client, 2000) || read(est_client, buf, 5) != 5 || memcmp(buf, "world", 5) != 0)
			append(err, errsz, "client end lost the unread \"world\" (got \"%.5s\"); ", buf);
	}
	if (write(est_client, "again", 5) != 5 || !wait_readable(est_server, 2000) || read(est_server, buf, 5) != 5 ||
	    memcmp(buf, "again", 5) != 0 || write(est_server, "reply", 5) != 5 || !wait_readable(est_client, 2000) ||
	    read(est_client, buf, 5) != 5 || memcmp(buf, "reply", 5) != 0)
		append(err, errsz, "the established connection does not carry new bytes; ");
}

/* criu restores a process's fds in order and sends a writer's unsent bytes as soon as its
 * socket is back: were the reader not back yet, and no network lock kept the writer's packets
 * from the listener (none does in a fresh guest), the listener would answer them with a reset
 * and the restore fail (criu 3.17's restore of its own images fails so). A writer gets an fd
 * above its reader's; the fd it had is closed. */
static int above(int writer, int reader)
{
	int moved = fcntl(writer, F_DUPFD, reader + 1);
	if (moved < 0)
		setup_fail("moving a writer's fd above its reader's");
	close(writer);
	return moved;
}

/* ---- stream: bytes in flight ---- */
/* `stream`: a writer faster than its reader, which mostly blocks in write() for room with
 * both queues full (a write smaller than PIPE_BUF may have moved part of its bytes);
 * `bursts`: 64 KiB every 5 ms to a reader that keeps up */
static int stream_write = 3000, stream_write_pause_ms = 0, stream_read_pause_ms = 2;
#define STREAM_READ 1000
static int stream_w = -1, stream_r = -1;
static volatile long stream_read, stream_sent;
static volatile int stream_draining;
static char stream_error[256];

static void *stream_writer(void *arg)
{
	(void)arg;
	static unsigned char buf[65536];
	for (;;) {
		for (int i = 0; i < stream_write; i++)
			buf[i] = pattern(stream_sent + i);
		ssize_t n = write(stream_w, buf, stream_write);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(stream_error, sizeof(stream_error), "stream write: %s", n ? strerror(errno) : "0");
			return NULL;
		}
		stream_sent += n;
		if (stream_write_pause_ms)
			sleep_ms(stream_write_pause_ms);
	}
}

static void *stream_reader(void *arg)
{
	(void)arg;
	static unsigned char buf[STREAM_READ];
	for (;;) {
		if (!stream_draining && stream_read_pause_ms)
			sleep_ms(stream_read_pause_ms);
		ssize_t n = read(stream_r, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(stream_error, sizeof(stream_error), "stream read: %s", n ? strerror(errno) : "end of stream");
			return NULL;
		}
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != pattern(stream_read + i)) {
				snprintf(stream_error, sizeof(stream_error), "stream byte %ld is %u, not %u",
					 stream_read + (long)i, buf[i], pattern(stream_read + i));
				return NULL;
			}
		stream_read += n;
	}
}

static void start_stream(const struct sockaddr_in *listener_addr)
{
	stream_w = socket(AF_INET, SOCK_STREAM, 0);
	if (stream_w < 0 || connect(stream_w, (const struct sockaddr *)listener_addr, sizeof(*listener_addr)) < 0 ||
	    (stream_r = accept(l4, NULL, NULL)) < 0)
		setup_fail("stream connection");
	stream_w = above(stream_w, stream_r);
	pthread_t t;
	if (pthread_create(&t, NULL, stream_writer, NULL) || pthread_create(&t, NULL, stream_reader, NULL))
		setup_fail("stream threads");
}

/* Every byte written before the check arrives once and in order (the reader drains the
 * queues at full speed meanwhile: a doubled or lost byte anywhere in them shows), and more
 * keep coming. */
static void check_stream(char *err, size_t errsz)
{
	long mark = stream_sent;
	stream_draining = 1;
	for (int i = 0; i < 2000 && !stream_error[0] && stream_read < mark + 10000; i++)
		sleep_ms(10);
	stream_draining = 0;
	if (stream_error[0])
		append(err, errsz, "%s; ", stream_error);
	else if (stream_read < mark + 10000)
		append(err, errsz, "stream stalled at byte %ld of %ld written; ", stream_read, stream_sent);
}

/* The bulk pair: the reader gets exactly the bytes the writer had written, in order, once. */
static void check_bulk(char *err, size_t errsz)
{
	unsigned char buf[4096];
	/* the writer resumes when its zero-window probe (or the reader's window update) gets
	 * through: allow it a few seconds */
	while (bulk_read < bulk_written && wait_readable(bulk_reader, 8000)) {
		long want = bulk_written - bulk_read < (long)sizeof(buf) ? bulk_written - bulk_read : (long)sizeof(buf);
		ssize_t n = read(bulk_reader, buf, want);
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != pattern(bulk_read + i)) {
				append(err, errsz, "bulk byte %ld is %u, not %u; ", bulk_read + (long)i, buf[i],
				       pattern(bulk_read + i));
				return;
			}
		bulk_read += n;
	}
	if (bulk_read != bulk_written)
		append(err, errsz, "bulk reader got %ld of %ld bytes; ", bulk_read, bulk_written);
	else if (wait_readable(bulk_reader, 100))
		append(err, errsz, "bulk reader has bytes beyond the %ld written; ", bulk_written);
	if (!(fcntl(bulk_writer, F_GETFL) & O_NONBLOCK) || getopt_int(bulk_writer, IPPROTO_TCP, TCP_NODELAY) != 1)
		append(err, errsz, "bulk writer lost O_NONBLOCK or TCP_NODELAY; ");
	char ext[8] = "";
	if (outside >= 0 && (!wait_readable(outside, 2000) || read(outside, ext, 7) != 7 || memcmp(ext, "outside", 7)))
		append(err, errsz, "the outside client's unread bytes are gone (\"%.7s\"); ", ext);
	outside = -1;  /* read once */
}

static void make_bulk_pair(const struct sockaddr_in6 *listener_addr)
{
	bulk_writer = socket(AF_INET6, SOCK_STREAM, 0);
	if (bulk_writer < 0 || opt(bulk_writer, SOL_SOCKET, SO_SNDBUF, BULK_WRITER_BUF) < 0 ||
	    opt(bulk_writer, IPPROTO_TCP, TCP_NODELAY, 1) < 0 ||
	    connect(bulk_writer, (const struct sockaddr *)listener_addr, sizeof(*listener_addr)) < 0 ||
	    (bulk_reader = accept(l6, NULL, NULL)) < 0 || opt(bulk_reader, SOL_SOCKET, SO_RCVBUF, BULK_BUF) < 0)
		setup_fail("bulk connection");
	bulk_writer = above(bulk_writer, bulk_reader);
	fcntl(bulk_writer, F_SETFL, O_NONBLOCK);
	unsigned char buf[4096];
	for (int idle = 0; idle < 20;) {
		for (int i = 0; i < (int)sizeof(buf); i++)
			buf[i] = pattern(bulk_written + i);
		ssize_t n = write(bulk_writer, buf, sizeof(buf));
		if (n > 0) {
			bulk_written += n;
			idle = 0;
		} else if (n < 0 && errno == EAGAIN) {
			sleep_ms(10);  /* let the window close and the send buffer fill */
			idle++;
		} else {
			setup_fail("bulk write");
		}
	}
}

/* A client outside the dumped tree: an orphan in a session of its own, connected to the IPv4
 * listener, that sends "outside" and then only waits. */
static void make_outside_client(const struct sockaddr_in *listener_addr)
{
	pid_t child = fork();
	if (child < 0)
		setup_fail("fork");
	if (child == 0) {
		if (fork() != 0)
			_exit(0);
		setsid();
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c < 0 || connect(c, (const struct sockaddr *)listener_addr, sizeof(*listener_addr)) < 0 ||
		    write(c, "outside", 7) != 7)
			_exit(1);
		for (;;)
			pause();
	}
	waitpid(child, NULL, 0);
	if (!wait_readable(l4, 5000) || (outside = accept(l4, NULL, NULL)) < 0 || !wait_readable(outside, 5000))
		setup_fail("the outside client's connection");
}

int main(int argc, char **argv)
{
	setsid();
	sigset_t blocked, waitmask;
	usr1_setup(&blocked, &waitmask, NULL);

	struct sockaddr_in a4 = v4("127.0.0.1", PORT_L4), ab = v4("127.0.0.1", PORT_BOUND);
	struct sockaddr_in au = v4("127.0.0.1", PORT_U4);
	struct sockaddr_in6 a6 = v6("::", PORT_L6), ad = v6("::", PORT_DUAL);
	struct sockaddr_in6 au6c = v6("::1", PORT_U6C), au6 = v6("::1", PORT_U6);

	l4 = socket(AF_INET, SOCK_STREAM, 0);
	if (l4 < 0 || opt(l4, SOL_SOCKET, SO_REUSEADDR, 1) < 0 || opt(l4, SOL_SOCKET, SO_RCVBUF, 65536) < 0 ||
	    bind(l4, (struct sockaddr *)&a4, sizeof(a4)) < 0 || listen(l4, 7) < 0)
		setup_fail("IPv4 listener");
	rcvbuf_l4 = getopt_int(l4, SOL_SOCKET, SO_RCVBUF);
	l6 = sock_bound(AF_INET6, SOCK_STREAM, &a6, sizeof(a6), 1);
	if (opt(l6, SOL_SOCKET, SO_KEEPALIVE, 1) < 0 || listen(l6, 3) < 0)
		setup_fail("IPv6 listener");
	dual = sock_bound(AF_INET6, SOCK_STREAM, &ad, sizeof(ad), 0);
	if (listen(dual, 5) < 0)
		setup_fail("dual-stack listener");
	bound = socket(AF_INET, SOCK_STREAM, 0);
	if (bound < 0 || opt(bound, IPPROTO_IP, IP_FREEBIND, 1) < 0 || bind(bound, (struct sockaddr *)&ab, sizeof(ab)) < 0)
		setup_fail("bound TCP socket");
	fresh = socket(AF_INET6, SOCK_STREAM, 0);
	u4 = sock_bound(AF_INET, SOCK_DGRAM, &au, sizeof(au), -1);
	if (opt(u4, SOL_SOCKET, SO_BROADCAST, 1) < 0 || setsockopt(u4, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) < 0)
		setup_fail("SO_BROADCAST or SO_BINDTODEVICE");
	u6 = sock_bound(AF_INET6, SOCK_DGRAM, &au6, sizeof(au6), 1);
	u6c = sock_bound(AF_INET6, SOCK_DGRAM, &au6c, sizeof(au6c), -1);
	if (connect(u6c, (struct sockaddr *)&au6, sizeof(au6)) < 0)
		setup_fail("connect UDP");
	ufresh = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (fresh < 0 || ufresh < 0)
		setup_fail("unbound sockets");
	/* datagrams the server has not read yet, from a socket that is gone by the snapshot */
	int sender = socket(AF_INET, SOCK_DGRAM, 0);
	for (int seq = 1; seq <= QUEUED; seq++)
		if (sendto(sender, &seq, sizeof(seq), 0, (struct sockaddr *)&au, sizeof(au)) != sizeof(seq))
			setup_fail("queueing datagram %d", seq);
	close(sender);
	if (argc > 1 && strcmp(argv[1], "established") == 0) {
		est_client = socket(AF_INET, SOCK_STREAM, 0);
		if (est_client < 0 || connect(est_client, (struct sockaddr *)&a4, sizeof(a4)) < 0 ||
		    (est_server = accept(l4, NULL, NULL)) < 0)
			setup_fail("established connection");
		if (write(est_client, "hello", 5) != 5 || write(est_server, "world", 5) != 5)
			setup_fail("queueing bytes on the connection");
		struct sockaddr_in6 lo6 = v6("::1", PORT_L6);
		make_bulk_pair(&lo6);
		if (getpid() != 1)	/* a container's init: its orphans are its own, in the tree */
			make_outside_client(&a4);
	} else if (argc > 1 && (strcmp(argv[1], "stream") == 0 || strcmp(argv[1], "bursts") == 0)) {
		if (strcmp(argv[1], "bursts") == 0) {
			stream_write = 65536;
			stream_write_pause_ms = 5;
			stream_read_pause_ms = 0;
		}
		start_stream(&a4);
	} else if (argc > 1) {
		setup_fail("unknown argument %s", argv[1]);
	}
	say("READY pid=%d bulk=%ld", (int)getpid(), bulk_written);

	char err[2048];
	for (;;) {
		wait_for_usr1(&blocked, &waitmask);
		err[0] = 0;
		check_options(err, sizeof(err));
		check_traffic(err, sizeof(err));
		if (stream_w >= 0)
			check_stream(err, sizeof(err));
		if (est_client >= 0) {
			check_established(err, sizeof(err));
			check_bulk(err, sizeof(err));
		}
		if (err[0])
			say("CHECK FAIL %s", err);
		else
			say("CHECK OK pid=%d", (int)getpid());
	}
}
