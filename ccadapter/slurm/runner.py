"""Runs Slurm client commands: prefix, timeout, transient-failure backoff, call counting.

Slurm's clients fail transiently while slurmctld or slurmdbd restarts ("Unable to contact
slurm controller", "Socket timed out"); those are retried with exponential backoff. Anything
else (bad option, permission denied) fails at once, with stderr kept for the message.
Output is decoded as UTF-8 with replacement: job names and scripts may hold any bytes.

Four ways to run: :meth:`SlurmRunner.run` (stdout, or an error), :meth:`~SlurmRunner.unchecked`
(one scontrol process answering many commands, where one unknown job makes the exit status
non-zero without spoiling the other answers), :meth:`~SlurmRunner.ask` (the same questions put
to a long-lived scontrol, :mod:`.session`: no process started per question) and
:meth:`~SlurmRunner.lines` (a large answer read line by line, so that a dump of every job
slurmctld holds never sits in memory whole).
Environment settings for the Slurm client (``SLURM_TIME_FORMAT``) go through ``env NAME=VALUE``
after the prefix, so they reach the client in a chroot or over ssh too.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import subprocess
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from tenacity import RetryCallState, retry_if_exception

from ccadapter.errors import SlurmCommandError, Stopped, TransientSlurmError
from ccadapter.retry import RetryPolicies, RetryPolicy
from ccadapter.slurm.session import MAX_AGE, Session, SessionEnded, SessionTimeout

log = logging.getLogger(__name__)

# How often a command's wait looks at the daemon's stop.
STOP_CHECK = 0.5

# stderr fragments that mean "try again later", seen from sacct and scontrol.
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"slurmdbd|Problem talking to the database|Connection timed out|"
    r"Resource temporarily unavailable|Zero Bytes were transmitted|"
    r"Unable to establish connection|Insane message length",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Completed:
    """A command's answer whatever its exit status (:meth:`SlurmRunner.unchecked`)."""

    stdout: str
    stderr: str
    returncode: int

    @property
    def transient(self) -> bool:
        """stderr says slurmctld or slurmdbd could not be reached (try again later)."""
        return bool(_TRANSIENT.search(self.stderr))


class CommandRunner(Protocol):
    """What the collector needs of a runner; tests replay recorded outputs through it."""

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str: ...

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None,
                  env: Mapping[str, str] | None = None) -> Completed: ...

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]: ...

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed: ...


@dataclass
class Tally:
    """What the Slurm commands run by one thread cost: how many, the bytes they printed, the
    CPU time they used (their own, as the kernel accounts it when they are reaped) and the
    wall time the thread waited for them. A reconciler's cycle cost is its own CPU plus this:
    Slurm's clients do the heavy lifting; and a slow cycle whose wall is mostly ``seconds``
    waited for Slurm's daemons, not for ccadapter."""

    commands: int = 0
    bytes: int = 0
    cpu: float = 0.0
    seconds: float = 0.0

    def minus(self, before: Tally) -> Tally:
        return Tally(self.commands - before.commands, self.bytes - before.bytes,
                     self.cpu - before.cpu, self.seconds - before.seconds)


class _Child(subprocess.Popen):
    """A Popen that keeps the child's resource usage when it reaps it (``os.wait4``), so a
    command's CPU time is known exactly even while other threads run other commands
    (``RUSAGE_CHILDREN`` would mix them). Overrides CPython's reaping hook, ``_try_wait``,
    which every Python since 3.3 calls with the same signature."""

    usage: resource.struct_rusage | None = None

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return self.pid, 0
        if pid == self.pid:
            self.usage = usage
        return pid, status

    @property
    def cpu(self) -> float:
        return self.usage.ru_utime + self.usage.ru_stime if self.usage else 0.0


@dataclass
class _Slot:
    """A long-lived process for one argv (:meth:`SlurmRunner.ask`), one question at a time."""

    session: Session | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class SlurmRunner:
    """Runs Slurm's client commands three ways -- once (``run``, ``unchecked``), read as a
    stream (``lines``), or put to a long-lived process (``ask``) -- under one prefix,
    timeout, retry policy and per-thread tally, which the three ways share: each counts,
    times and classifies failures alike."""

    def __init__(
        self,
        prefix: Sequence[str] = (),
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        env: Mapping[str, str] | None = None,
        on_command: Callable[[str, float, bool], None] | None = None,
        session_age: float = MAX_AGE,
        sessions: int = 1,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        """``on_command(command, seconds, ok)`` hears of every run, retries included
        (the daemon's metrics). ``sessions``: how many long-lived processes :meth:`ask`
        keeps per argv, for questions asked at the same time by several threads."""
        self.prefix = list(prefix)
        self.timeout = timeout
        self.retry = retry or RetryPolicies().slurm
        self.env = dict(env) if env is not None else None
        self.calls: Counter[str] = Counter()
        self.on_command = on_command
        self.session_age = session_age
        self.sessions = max(1, sessions)
        # the daemon's stop (:class:`~ccadapter.runtime.stopflag.StopFlag`): a one-shot
        # command in flight is killed within STOP_CHECK of it
        self.stopping = stopping
        self._local = threading.local()
        self._slots: dict[tuple[str, ...], list[_Slot]] = {}
        self._slots_lock = threading.Lock()
        # a runner dropped without close() (a cluster leaves the roster) ends its processes
        weakref.finalize(self, _end_sessions, self._slots)

    def tally(self) -> Tally:
        """The cost of the commands the calling thread ran so far (a copy)."""
        mine = getattr(self._local, "tally", None)
        return replace(mine) if mine else Tally()

    def _spent(self, nbytes: int, cpu: float, started: float) -> None:
        mine = getattr(self._local, "tally", None)
        if mine is None:
            mine = self._local.tally = Tally()
        mine.commands += 1
        mine.bytes += nbytes
        mine.cpu += cpu
        mine.seconds += time.monotonic() - started

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        """Run ``argv`` (e.g. ``["sacct", "--json"]``) and return its stdout; ``env`` is
        set for the Slurm client only."""
        if not retry:
            return self._run_once(argv, timeout, env)
        retrying = self.retry.retrying(
            retry=retry_if_exception(lambda e: isinstance(e, TransientSlurmError)),
            before_sleep=_log_retry, reraise=True)
        return retrying(self._run_once, argv, timeout, env)

    def _run_once(self, argv: Sequence[str], timeout: float | None,
                  env: Mapping[str, str] | None = None) -> str:
        done = self._counted(argv, lambda: self._execute(argv, timeout, None, env))
        if done.returncode != 0:
            cls = TransientSlurmError if done.transient else SlurmCommandError
            raise cls(argv, f"exit code {done.returncode}", done.stderr)
        return done.stdout

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None,
                  env: Mapping[str, str] | None = None) -> Completed:
        """Run once, without retries, and return the answer whatever the exit status;
        raises only when the command cannot be run or times out."""
        return self._counted(argv, lambda: self._execute(argv, timeout, stdin, env))

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed:
        """Like :meth:`unchecked`, answered by a long-lived ``argv`` process (up to
        ``sessions`` per argv and env) that reads ``stdin`` as its next questions; done when
        ``complete(stdout)``. While other threads' questions occupy them all, a process of
        its own answers instead, so a long question never holds up a short one. A process
        that ends before it answers gives its exit status, as a one-shot process would."""
        full = (*self.prefix, *_setenv(env), *argv)
        with self._slots_lock:
            slots = self._slots.setdefault(full, [])
            slot = next((s for s in slots if s.lock.acquire(blocking=False)), None)
            if slot is None and len(slots) < self.sessions:
                slot = _Slot()
                slot.lock.acquire()
                slots.append(slot)
        if slot is None:
            return self.unchecked(argv, stdin=stdin, timeout=timeout, env=env)
        try:
            return self._counted(argv, lambda: self._ask(slot, full, argv, stdin, complete,
                                                         timeout or self.timeout))
        finally:
            slot.lock.release()

    def _ask(self, slot: _Slot, full: tuple[str, ...], argv: Sequence[str], stdin: str,
             complete: Callable[[str], bool], limit: float) -> Completed:
        started = time.monotonic()
        if slot.session is not None and not slot.session.fresh(self.session_age):
            slot.session.close()
            slot.session = None
        while True:
            reused = slot.session is not None
            if slot.session is None:
                try:
                    slot.session = Session(full, self.env)
                except OSError as exc:
                    raise SlurmCommandError(argv, f"cannot run {full[0]}: {exc.strerror}"
                                            ) from None
            session = slot.session
            cpu = session.cpu()
            try:
                out, err = session.ask(stdin, complete, limit)
            except SessionTimeout as exc:
                slot.session = None
                self._spent(0, 0.0, started)
                raise TransientSlurmError(argv, str(exc)) from None
            except SessionEnded as exc:
                slot.session = None
                session.close()
                if reused and not exc.stdout:  # ended while idle: a new one answers
                    continue
                self._spent(len(exc.stdout), 0.0, started)
                return Completed(exc.stdout, exc.stderr, exc.returncode)
            self._spent(len(out), max(0.0, session.cpu() - cpu), started)
            return Completed(out, err, 0)

    def close(self) -> None:
        """End the long-lived processes (:meth:`ask`); they end on their own when this
        process exits, as their input closes."""
        with self._slots_lock:
            _end_sessions(self._slots)

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]:
        """stdout line by line while the command runs; raises at the end when it failed.
        The caller must read to the end (or close the generator) to reap the process."""
        self.calls[argv[0]] += 1
        started = time.monotonic()
        limit = timeout or self.timeout
        try:
            proc = _Child([*self.prefix, *_setenv(env), *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=self.env)
        except OSError as exc:
            self._report(argv, started, False)
            raise SlurmCommandError(argv, f"cannot run {self._program(argv)}: "
                                          f"{exc.strerror}") from None
        killer = threading.Timer(limit, proc.kill)
        killer.start()
        ok = False
        nbytes = 0
        try:
            assert proc.stdout is not None and proc.stderr is not None
            for raw in proc.stdout:
                nbytes += len(raw)
                yield raw.decode("utf-8", "replace")
            stderr = proc.stderr.read().decode("utf-8", "replace")
            code = proc.wait()
            if not killer.is_alive() and code != 0:
                raise TransientSlurmError(argv, f"no answer within {limit:g} s (killed)")
            if code != 0:
                cls = TransientSlurmError if _TRANSIENT.search(stderr) else SlurmCommandError
                raise cls(argv, f"exit code {code}", stderr)
            ok = True
        finally:
            killer.cancel()
            if proc.poll() is None:  # the reader stopped early
                proc.kill()
                proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]
            self._spent(nbytes, proc.cpu, started)
            self._report(argv, started, ok)

    def _counted(self, argv: Sequence[str], execute: Callable[[], Completed]) -> Completed:
        self.calls[argv[0]] += 1
        started = time.monotonic()
        ok = False
        try:
            done = execute()
            ok = done.returncode == 0
            return done
        finally:
            self._report(argv, started, ok)

    def _report(self, argv: Sequence[str], started: float, ok: bool) -> None:
        elapsed = time.monotonic() - started
        log.debug("%s: %s in %.3f s", " ".join(argv[:3]), "ok" if ok else "failed", elapsed)
        if self.on_command:
            self.on_command(argv[0], elapsed, ok)

    def _program(self, argv: Sequence[str]) -> str:
        return [*self.prefix, *argv][0]

    def _wait(self, proc: _Child, argv: Sequence[str], stdin: str | None, limit: float,
              started: float) -> tuple[bytes, bytes]:
        """The child's output, once it ended; killed when ``limit`` passed (a transient
        failure) or the daemon stops (:class:`Stopped`, looked at every
        :data:`STOP_CHECK` seconds)."""
        data = stdin.encode() if stdin is not None else None
        while True:
            left = started + limit - time.monotonic()
            try:
                return proc.communicate(data, timeout=max(0.0, min(left, STOP_CHECK)))
            except subprocess.TimeoutExpired:
                data = None  # sent already: communicate() goes on where it was
                stopping = self.stopping is not None and self.stopping()
                if not stopping and time.monotonic() - started < limit:
                    continue
                proc.kill()  # not communicate(): a grandchild may hold the pipes open
                proc.wait()
                self._spent(0, proc.cpu, started)
                if stopping:
                    raise Stopped(argv, "cut short: the daemon is stopping") from None
                raise TransientSlurmError(argv, f"no answer within {limit:g} s (killed)"
                                          ) from None

    def _execute(self, argv: Sequence[str], timeout: float | None, stdin: str | None,
                 env: Mapping[str, str] | None) -> Completed:
        full = [*self.prefix, *_setenv(env), *argv]
        limit = timeout or self.timeout
        started = time.monotonic()
        try:
            proc = _Child(full, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        except OSError as exc:
            raise SlurmCommandError(argv, f"cannot run {full[0]}: {exc.strerror}") from None
        with proc:
            out, err = self._wait(proc, argv, stdin, limit, started)
        self._spent(len(out), proc.cpu, started)
        return Completed(out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                         proc.returncode)


def _end_sessions(slots: dict[tuple[str, ...], list[_Slot]]) -> None:
    """End every long-lived process of ``slots`` and forget them."""
    for slot in [s for pool in list(slots.values()) for s in pool]:
        with slot.lock:
            if slot.session is not None:
                slot.session.close()
                slot.session = None
    slots.clear()


def _setenv(env: Mapping[str, str] | None) -> list[str]:
    """``env NAME=VALUE`` in argv: it reaches the Slurm client through any prefix (a chroot,
    ssh), where the environment of our own process would not."""
    return ["env", *(f"{k}={v}" for k, v in env.items())] if env else []


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning("transient Slurm failure (attempt %d), retrying: %s", state.attempt_number, exc)
