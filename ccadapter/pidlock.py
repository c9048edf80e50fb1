"""One daemon per config: a lock held for the process's life, and its PID for humans.

The lock is ``<pidFilePath>.lock`` (flock through filelock): the kernel releases it when
the process dies, however it dies, so a stale PID file left by a crash is no obstacle.
The PID file itself is only written after the lock is held.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

from ccadapter.errors import CcAdapterError


class AlreadyRunning(CcAdapterError):
    pass


class PidLock:
    def __init__(self, pid_path: str | Path) -> None:
        self.pid_path = Path(pid_path)
        self._lock = FileLock(str(self.pid_path) + ".lock")

    def holder(self) -> int | None:
        try:
            text = self.pid_path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def acquire(self) -> None:
        self.pid_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            who = self.holder()
            raise AlreadyRunning(
                f"another ccadapter daemon holds {self._lock.lock_file}"
                + (f" (PID {who})" if who else "")) from None
        self.pid_path.write_text(f"{os.getpid()}\n")

    def release(self) -> None:
        if self.holder() == os.getpid():
            self.pid_path.unlink(missing_ok=True)
        self._lock.release()

    def is_held_elsewhere(self) -> bool:
        """True when a running daemon holds the lock (for ``status``)."""
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            return True
        self._lock.release()
        return False


    def lock_owners(self) -> list[int] | None:
        """PIDs holding the lock, read from ``/proc/locks`` without touching the lock
        itself: testing it by taking it, however briefly, would make a daemon starting in
        that instant give up. ``None`` when the kernel does not say (no ``/proc/locks``)."""
        try:
            with open("/proc/locks", encoding="ascii", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return None
        try:
            st = os.stat(self._lock.lock_file)
        except FileNotFoundError:
            return []
        # "6: FLOCK  ADVISORY  WRITE 4455 fe:00:1474566 0 EOF" (major:minor in hex);
        # waiters are listed as "6: -> FLOCK ..." and do not hold it.
        device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        return [int(f[4]) for f in (line.split() for line in lines)
                if len(f) >= 6 and f[1] == "FLOCK" and f[5] == device]


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, belongs to another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]
