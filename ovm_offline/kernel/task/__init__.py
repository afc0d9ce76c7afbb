"""task: ``struct task_struct`` and what hangs off it per task or thread group: the task
lists (tasks), ``struct pid`` and PID namespaces' numbers (pid), scheduling (sched),
credentials (cred), signal handlers and queues (signal), itimers and POSIX timers (timers),
and the timekeeper's clocks (timekeeping)."""
