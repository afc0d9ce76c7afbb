"""locking: who holds a sleeping lock, read from the lock itself (rwsem); whether a writer holds
an rwlock (rwlock: the task list's tasklist_lock); whether a sequence counter is being written (seqlock)."""
