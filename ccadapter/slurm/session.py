"""A long-lived Slurm client process that reads its commands from stdin (``scontrol -d``).

Starting ``scontrol`` costs CPU (loading libslurm and its plugins, reading slurm.conf) and
more wall on a loaded host; answering one ``show job ID`` in a process that already runs
costs a fraction of that. The Prolog/Epilog fast path asks
for a few jobs several times a second, so one process kept between those questions is most
of the daemon's CPU saved. scontrol reading a pipe flushes each answer (its prompt and echo,
``scontrol: ``, included), so an answer is complete when the caller's marker shows up.

Each question still opens its own connection to slurmctld, so a restarted or failed-over
slurmctld is reached as by a new process. The process is replaced when it ends (a fatal
error), fails to answer in time, or is older than ``max_age`` (slurm.conf read afresh,
whatever a long-running client might accumulate). stderr is read alongside stdout: scontrol
writes a question's error before the next answer, so it is in the pipe by the time the
marker after it is."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

MAX_AGE = 600.0  # seconds a process serves before it is replaced


class SessionEnded(Exception):
    """The process ended (or never started) before it answered: ``returncode`` and what it
    printed are kept for the caller's error."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"exit code {returncode}")
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


class SessionTimeout(Exception):
    """No complete answer within the time allowed; the process was killed."""


class Session:
    """One client process and its pipes. Not thread-safe: the owner serialises questions."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.argv = list(argv)
        self.clock = clock
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.born = clock()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fresh(self, max_age: float = MAX_AGE) -> bool:
        """Still running and young enough to be asked again."""
        return self.proc.poll() is None and self.clock() - self.born < max_age

    def cpu(self) -> float:
        """The process's CPU seconds so far (user + system), from /proc; 0 where unknown.
        A process reaped at the end is accounted by the kernel to us only then, so a
        question's cost is the difference of two readings."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def ask(self, text: str, complete: Callable[[str], bool],
            timeout: float) -> tuple[str, str]:
        """Write ``text`` and read until ``complete(stdout so far)``; (stdout, stderr).
        Raises SessionEnded when the process ends first, SessionTimeout (after killing
        it) when ``timeout`` passes first."""
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        todo = memoryview(text.encode())
        out, err = bytearray(), bytearray()
        deadline = self.clock() + timeout
        reading = True  # stdout open
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ, out)
            sel.register(self.proc.stderr, selectors.EVENT_READ, err)
            if todo:
                sel.register(self.proc.stdin, selectors.EVENT_WRITE)
            while True:
                left = deadline - self.clock()
                if left <= 0:
                    self.close(kill=True)
                    raise SessionTimeout(f"no answer within {timeout:g} s (killed)")
                for key, _ in sel.select(left):
                    if key.fileobj is self.proc.stdin:
                        try:
                            todo = todo[os.write(key.fd, todo):]
                        except BrokenPipeError:
                            todo = todo[:0]
                        if not todo:
                            sel.unregister(self.proc.stdin)
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        reading = reading and key.fileobj is not self.proc.stdout
                        continue
                    key.data.extend(chunk)
                if complete(out.decode("utf-8", "replace")):
                    err.extend(self._drain_stderr())
                    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
                if not reading:
                    code = self.proc.wait()
                    err.extend(self._drain_stderr())
                    raise SessionEnded(code, out.decode("utf-8", "replace"),
                                       err.decode("utf-8", "replace"))

    def _drain_stderr(self) -> bytes:
        """What stderr holds now, without waiting."""
        assert self.proc.stderr is not None
        got = bytearray()
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 1 << 16)
            except (BlockingIOError, ValueError, OSError):
                return bytes(got)
            if not chunk:
                return bytes(got)
            got.extend(chunk)

    def close(self, kill: bool = False) -> None:
        """End the process: end of input (it quits), or a kill when asked or when it does
        not quit within a second."""
        if kill and self.proc.poll() is None:
            self.proc.kill()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
