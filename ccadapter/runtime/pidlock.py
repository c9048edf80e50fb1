"""The daemon's PID file, for humans and systemd, guarded by a lock of its own.

The lock is ``<pidFilePath>.lock`` (flock through filelock): the kernel releases it when
the process dies, however it dies, so a stale PID file left by a crash is no obstacle.
The PID file itself is only written after the lock is held.

The outbox has its own lock (:mod:`ccadapter.runtime.statelock`), taken by every process that
writes it. This one stays for what lives beside the PID file, in the runtime directory:
the PID file itself and the hook socket (the daemon removes a socket it finds at
prepSockListenPath, which is only safe while no other ccadapter daemon uses that path).
Two daemons with their own state directories but the same pidFilePath would otherwise
overwrite each other's PID file and steal each other's socket. And ``recover`` tells our
daemon from another program named in the PID file (cc-slurm-adapter uses the same default
path) by whether that PID holds this lock. Only the daemon and ``recover`` take it.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

from ccadapter.errors import CcAdapterError, FileAccessError


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
        """Take the lock and write our PID; :class:`AlreadyRunning` names the holder, and a
        directory that cannot be used is a :class:`FileAccessError` naming pidFilePath."""
        try:
            self.pid_path.parent.mkdir(parents=True, exist_ok=True)
            self._lock.acquire(timeout=0)
        except Timeout:
            who = self.holder()
            raise AlreadyRunning(
                f"another ccadapter daemon holds {self._lock.lock_file}"
                + (f" (PID {who})" if who else "")) from None
        except OSError as exc:
            raise FileAccessError("pidFilePath", "lock", f"{self.pid_path}.lock",
                                  exc) from None
        try:
            self.pid_path.write_text(f"{os.getpid()}\n")
        except OSError as exc:
            self._lock.release()
            raise FileAccessError("pidFilePath", "write", str(self.pid_path), exc) from None

    def release(self) -> None:
        if self.holder() == os.getpid():
            self.pid_path.unlink(missing_ok=True)
        self._lock.release()

    def lock_owners(self) -> list[int] | None:
        """PIDs holding the lock (see :func:`flock_owners`)."""
        return flock_owners(self._lock.lock_file)


def flock_owners(path: str | Path) -> list[int] | None:
    """PIDs holding a flock on ``path``, read from ``/proc/locks`` without touching the lock
    itself: testing it by taking it, however briefly, would make a process starting in that
    instant give up. ``None`` when the kernel does not say (no ``/proc/locks``, or the file
    cannot be looked at)."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return []  # no lock file: nobody holds it
    except OSError:
        return None
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
