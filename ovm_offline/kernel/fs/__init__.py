"""fs: files and the file system as a process sees them: ``struct files_struct`` and
``struct file`` (fdtable), dentries, mounts and paths (dcache), ``struct fs_struct``
(fs_struct), pipes and FIFOs (pipe), ttys (tty), and anon-inode files: eventfd, signalfd,
timerfd, epoll (anonfds), inotify and fanotify groups and their marks (fsnotify)."""
