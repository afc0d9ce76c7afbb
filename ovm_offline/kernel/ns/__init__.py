"""ns: namespaces and cgroups: ``struct nsproxy`` and namespace inode numbers (nsproxy),
cgroup v2 membership and directories (cgroup), IPC namespaces with System V objects (ipc)."""
