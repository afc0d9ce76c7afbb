"""crossview: the kernel's independent views of its tasks (the task list both ways, the pid
idrs, children lists, thread lists, the CPUs' current tasks and run queues, the pids open files
hold) and where they disagree: a task a hostile guest unlinked from one list is still in
another (Volatility 2's linux_psxview, for a snapshot)."""
