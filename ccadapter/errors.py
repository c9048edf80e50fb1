"""Typed errors.

Every error that reaches an operator names what is wrong (a config key, a Slurm command and
version, a job id) so that the message alone is enough to act on it. Secrets never go into
these messages: callers pass keys and commands, never values of secret settings.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence


class CcAdapterError(Exception):
    """Base of all errors ccadapter raises on purpose."""


class ConfigError(CcAdapterError):
    """A config value is unusable; ``key`` is the offending key as written in the file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config key {key!r}: {message}")
        self.key = key


class SlurmCommandError(CcAdapterError):
    """A Slurm command failed, timed out or could not be started."""

    def __init__(self, argv: Sequence[str], message: str, stderr: str = "") -> None:
        # One line: a multi-line log record becomes several unrelated journal entries.
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        detail = f": {' | '.join(lines)}" if lines else ""
        super().__init__(f"{' '.join(argv)}: {message}{detail}")
        self.argv = list(argv)
        self.stderr = stderr


class TransientSlurmError(SlurmCommandError):
    """A failure worth retrying (timeout, controller or database unreachable)."""


class Stopped(SlurmCommandError):
    """The daemon is stopping: a command (or a routine's next batch) was cut short. What it
    would have done is repeated at the next start; never retried, never said as an error."""


class SlurmParseError(CcAdapterError):
    """Slurm answered something we cannot read; names the version and the command, and the
    job (``job_id``) when the record that failed names one (it is then asked again later)."""

    def __init__(self, version: str, command: str, detail: str,
                 job_id: int | None = None) -> None:
        super().__init__(f"Slurm {version}, `{command}`: {detail}")
        self.version = version
        self.command = command
        self.detail = detail
        self.job_id = job_id


class UnsupportedSlurmVersion(SlurmParseError):
    """The output comes from a Slurm generation we have no parser for."""


class OutboxError(CcAdapterError):
    """The outbox could not store a change (disk full, file unwritable). Nothing was
    half-written: the transaction was rolled back, and whoever asked will ask again."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"outbox {path}: {detail}")
        self.path = path


class FileAccessError(CcAdapterError):
    """A file or directory the config names cannot be used (permissions, a full disk, a
    path through a file). Names the key, the path, the system's reason and what to do."""

    def __init__(self, key: str, action: str, path: str, exc: OSError) -> None:
        reason = exc.strerror or type(exc).__name__
        super().__init__(f"config key {key!r}: cannot {action} {path}: {reason}; "
                         f"{os_advice(exc)}")
        self.key = key
        self.path = path


def os_advice(exc: OSError) -> str:
    """What an operator does about a failed file operation, by its errno."""
    advice = {
        errno.EACCES: "run as the daemon's user (or root), or give that user access",
        errno.EPERM: "run as the daemon's user (or root), or give that user access",
        errno.ENOSPC: "free space on that file system",
        errno.EDQUOT: "free space (the user's disk quota is used up)",
        errno.EROFS: "the file system is read-only (under systemd: ReadWritePaths=)",
        errno.ENOTDIR: "a part of the path is a file, not a directory: correct the path",
        errno.ENOENT: "a part of the path does not exist: create it or correct the path",
    }
    return advice.get(exc.errno or 0, "check the path and its permissions")
