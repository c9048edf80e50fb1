"""The daemon of the month-of-life run (tests/bench/life.py): ``ccadapter daemon`` itself, its
click command with its config, pid and state locks, outbox, hook socket, delivery and signal
handling, given two things through the CLI's ``Deps``: the site clock
(tests/bench/simclock.py) and the simulated Slurm's answers (tests/bench/life_slurm.py) as
its ``CommandRunner``. Nothing else of the product is replaced; the Slurm commands'
subprocess handling (``SlurmRunner``) is the one part not exercised here (the real-time
soak, tests/bench/soak.py, runs it against real Slurm).

    python -m tests.bench.life_daemon --config C --clock F --slurm SOCKET [--log-level L]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ccadapter.cli import main as cli_main
from ccadapter.cli.base import Deps
from ccadapter.errors import SlurmCommandError, TransientSlurmError
from ccadapter.slurm.runner import Completed
from tests.bench.simclock import SimClock


class RemoteRunner:
    """The daemon's CommandRunner: each call answered by the simulation's process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()

    def _ask(self, req: dict[str, Any]) -> Any:
        for attempt in (1, 2):  # a connection the simulation dropped: once more
            conn = getattr(self._local, "conn", None)
            if conn is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self.path)
                conn = self._local.conn = (sock, sock.makefile("rb"))
            sock, reader = conn
            try:
                sock.sendall(json.dumps(req).encode() + b"\n")
                line = reader.readline()
                if not line:
                    raise ConnectionResetError("the simulation closed the connection")
                break
            except OSError:
                sock.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        answer = json.loads(line)
        if "err" in answer:
            kind, argv, message, stderr = answer["err"]
            cls = TransientSlurmError if kind == "transient" else SlurmCommandError
            exc = cls(argv, "exit code 1", stderr)
            exc.args = (message,)
            raise exc
        return answer["ok"]

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        return self._ask({"m": "run", "argv": list(argv), "env": dict(env or {})})

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None,
                  env: Mapping[str, str] | None = None) -> Completed:
        out, err, rc = self._ask({"m": "unchecked", "argv": list(argv),
                                  "env": dict(env or {}), "stdin": stdin})
        return Completed(out, err, rc)

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed:
        return self.unchecked(argv, stdin=stdin, timeout=timeout, env=env)

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]:
        text = self._ask({"m": "lines", "argv": list(argv), "env": dict(env or {})})
        yield from text.splitlines(keepends=True)

    def set(self, key: str, value: Any) -> None:
        self._ask({"m": "set", "key": key, "value": value})

    def close(self) -> None:
        """This thread's connection closed (the driver's one-off switches)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn[1].close()
            conn[0].close()
            self._local.conn = None

    def asked(self) -> dict[str, int]:
        return self._ask({"m": "asked"})


def _count_objects(path: Path, every: float = 30.0) -> None:
    """A diagnosis of memory growth (not part of any measurement): every ``every`` real
    seconds, the live objects by type, one JSON line each, appended to ``path``."""
    import gc
    from collections import Counter

    def loop() -> None:
        while True:
            time.sleep(every)
            counts = Counter(type(o).__name__ for o in gc.get_objects())
            with path.open("a") as out:
                out.write(json.dumps({"t": time.time(), "top": counts.most_common(40)}) + "\n")

    threading.Thread(target=loop, name="object-counts", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--clock", type=Path, required=True)
    ap.add_argument("--slurm", required=True)
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    if os.environ.get("CCADAPTER_LIFE_COUNTS"):
        _count_objects(Path(os.environ["CCADAPTER_LIFE_COUNTS"]))
    clock = SimClock(args.clock)
    runner = RemoteRunner(args.slurm)
    deps = Deps(runner=lambda config: runner, daemon_runner=lambda config: runner,
                daemon_clock=clock.as_clock())
    cli_main(["daemon", "--config", args.config, "--log-level", args.log_level], obj=deps,
             prog_name="ccadapter")


if __name__ == "__main__":
    sys.exit(main())
