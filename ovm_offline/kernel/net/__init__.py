"""net: sockets: ``struct socket``, ``struct sock`` and its queues, and UNIX domain sockets
(unix)."""
