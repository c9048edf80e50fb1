"""Runs Slurm client commands: prefix, timeout, transient-failure backoff, call counting.

Slurm's clients fail transiently while slurmctld or slurmdbd restarts ("Unable to contact
slurm controller", "Socket timed out"); those are retried with exponential backoff. Anything
else (bad option, permission denied) fails at once, with stderr kept for the message.
Output is decoded as UTF-8 with replacement: job names and scripts may hold any bytes.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from ccadapter.errors import SlurmCommandError

log = logging.getLogger(__name__)

# stderr fragments that mean "try again later", seen from sacct/squeue/scontrol/sinfo.
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"slurmdbd|Problem talking to the database|Connection timed out|"
    r"Resource temporarily unavailable|Zero Bytes were transmitted|"
    r"Unable to establish connection|Insane message length",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure."""

    attempts: int = 3
    initial_wait: float = 0.5
    max_wait: float = 5.0


class CommandRunner(Protocol):
    """What the collector needs of a runner; tests replay recorded outputs through it."""

    def run(self, argv: Sequence[str], *, retry: bool = True,
            timeout: float | None = None) -> str: ...


class TransientSlurmError(SlurmCommandError):
    """A failure worth retrying (timeout, controller or database unreachable)."""


class SlurmRunner:
    """Runs one Slurm client command at a time and counts invocations per command."""

    def __init__(
        self,
        prefix: Sequence[str] = (),
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        env: Mapping[str, str] | None = None,
        on_command: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        """``on_command(command, seconds, ok)`` hears of every run, retries included
        (the daemon's metrics)."""
        self.prefix = list(prefix)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.env = dict(env) if env is not None else None
        self.calls: Counter[str] = Counter()
        self.on_command = on_command

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None) -> str:
        """Run ``argv`` (e.g. ``["sacct", "--json"]``) and return its stdout."""
        if not retry:
            return self._run_once(argv, timeout)
        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=wait_random_exponential(
                multiplier=self.retry.initial_wait, max=self.retry.max_wait
            ),
            retry=retry_if_exception(lambda e: isinstance(e, TransientSlurmError)),
            before_sleep=_log_retry,
            reraise=True,
        )
        return retrying(self._run_once, argv, timeout)

    def _run_once(self, argv: Sequence[str], timeout: float | None) -> str:
        self.calls[argv[0]] += 1
        started = time.monotonic()
        ok = False
        try:
            out = self._execute(argv, timeout)
            ok = True
            return out
        finally:
            elapsed = time.monotonic() - started
            log.debug("%s: %s in %.3f s", " ".join(argv[:3]), "ok" if ok else "failed",
                      elapsed)
            if self.on_command:
                self.on_command(argv[0], elapsed, ok)

    def _execute(self, argv: Sequence[str], timeout: float | None) -> str:
        full = [*self.prefix, *argv]
        try:
            proc = subprocess.run(
                full,
                capture_output=True,
                timeout=timeout or self.timeout,
                env=self.env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TransientSlurmError(
                argv, f"no answer within {timeout or self.timeout:g} s (killed)"
            ) from None
        except OSError as exc:
            raise SlurmCommandError(argv, f"cannot run {full[0]}: {exc.strerror}") from None
        stderr = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0:
            cls = TransientSlurmError if _TRANSIENT.search(stderr) else SlurmCommandError
            raise cls(argv, f"exit code {proc.returncode}", stderr)
        return proc.stdout.decode("utf-8", "replace")


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning("transient Slurm failure (attempt %d), retrying: %s", state.attempt_number, exc)
