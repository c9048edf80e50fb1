"""Process plumbing: the PID file and its lock (:mod:`.pidlock`), the outbox's lock
(:mod:`.statelock`), systemd's notify socket (:mod:`.sdnotify`) and the lastRun file
(:mod:`.lastrun`)."""
