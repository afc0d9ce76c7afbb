"""locking: who holds a sleeping lock, read from the lock itself (rwsem)."""
