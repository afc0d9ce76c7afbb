"""net: sockets: ``struct socket``, ``struct sock`` and its queues (sock), UNIX domain sockets
(unix), IPv4/IPv6 TCP and UDP sockets (inet), network devices by index (netdev)."""
