"""One writer per outbox: a lock file beside it, held for the writer's whole run.

The outbox is what two processes must not share. The per-run order (a stop only after its
start) is kept by what one process hands out of the outbox; two processes draining one
outbox at once send a stop beside its own start, and a cc-backend that answers 422 to the
stop of a job it does not know yet would count it as done. So the lock lives with the data,
in the state directory (``outbox.lock`` next to ``outbox.sqlite``), and every process that
changes the outbox takes it: ``daemon``, ``sync``, ``backfill``, ``recover``, ``queue retry``
and ``queue drop``. A second one is refused. Readers (``status``, ``queue list``, ``sync
--dry-run``, which works on a copy) never take it.

The kernel's flock is the truth: it goes with the process however the process ends, and the
file is never removed (removing a lock file lets two processes lock two different files).
The text in the file -- PID, command and config file of the holder -- is only for the
message a refused process prints: it is written after the lock is taken and emptied before
it is released; when it is missing or stale, the PID comes from ``/proc/locks``. This is
not filelock (which the PID lock uses): filelock opens its file with ``O_TRUNC``, so every
refused attempt would erase the holder's text.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from ccadapter.errors import CcAdapterError, FileAccessError
from ccadapter.runtime.pidlock import flock_owners

LOCK_FILE = "outbox.lock"


@dataclass(frozen=True)
class Holder:
    """Who holds the lock, as far as anyone can tell."""

    pid: int | None
    command: str | None = None  # "daemon", "sync --once", ...
    config: str | None = None  # the config file; "" for the built-in defaults

    def __str__(self) -> str:
        who = f"PID {self.pid}" if self.pid else "another process"
        if self.command is None:
            return who
        config = f"config {self.config}" if self.config else "built-in config"
        return f"{who} (ccadapter {self.command}, {config})"


class OutboxBusy(CcAdapterError):
    """Another process holds the outbox's lock."""

    def __init__(self, outbox_dir: Path, holder: Holder) -> None:
        super().__init__(f"the outbox in {outbox_dir} is in use by {holder}")
        self.holder = holder


class StateLock:
    def __init__(self, state_dir: str | Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, command: str, config_file: str | None) -> None:
        """Take the lock or raise :class:`OutboxBusy` naming the holder; a state directory
        that cannot be used raises :class:`FileAccessError` naming ``stateDirectory``."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise FileAccessError("stateDirectory", "create the outbox lock", str(self.path),
                                  exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutboxBusy(self.state_dir, self.holder()) from None
        except OSError as exc:
            os.close(fd)
            raise FileAccessError("stateDirectory", "lock", str(self.path), exc) from None
        self._fd = fd
        text = json.dumps({"pid": os.getpid(), "command": command,
                           "config": config_file or "", "since": time.time()})
        with suppress(OSError):  # a full disk: the lock holds all the same; /proc/locks names us
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{text}\n".encode(), 0)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with suppress(OSError):  # before unlocking: the next holder's text is never erased
            os.ftruncate(fd, 0)
        os.close(fd)  # releases the flock

    def holder(self) -> Holder:
        """The holder's PID, command and config, from the file's text, checked against the
        kernel's list of lock holders: a text left by a process that died is not believed."""
        owners = flock_owners(self.path)
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            said = Holder(int(raw["pid"]), str(raw["command"]), str(raw["config"]))
        except (OSError, ValueError, KeyError, TypeError):
            said = None
        if said is not None and (owners is None or said.pid in owners):
            return said
        return Holder(owners[0] if owners else None)
