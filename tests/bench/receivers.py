"""What the pipeline benchmark delivers to: the real cc-backend 1.5.4 (SQLite, file archive),
or the stand-in in a process of its own (5 ms per request; tests.bench.scale_catchup's
catch-up, measured before the real server was in the test bed). Each is made before the
daemon starts (its address and token go into the daemon's config) and started once the
backlog is enqueued; :meth:`check` says what the receiver holds afterwards.

Every results file names its receiver (``receiver``): :data:`CC_BACKEND` or :data:`STANDIN`.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Protocol

import pytest

from tests.ccbackend import RECEIVER as CC_BACKEND
from tests.ccbackend import CcBackend, Nodes

STANDIN = "stand-in"
STANDIN_LATENCY = 0.005  # seconds the stand-in takes per request
# cc-backend's job cache is committed at its default interval (``commit-job-worker``: None
# leaves it out of the config, 2 min), as a site runs it; the daemon's drain and the
# ceiling's client run against the same setting. Not the tests' 2 s: a stop of a job still
# in the cache then races a commit every 2 s (see RealCcBackend.check: 0.2 % of the minimal
# client's stops and 2 % of the daemon's were lost so in trials of 2,000 to 3,000 jobs).
COMMIT_INTERVAL: str | None = None
DEFAULT_COMMIT = "2m"  # cc-backend 1.5.4's own commit interval


class Receiver(Protocol):
    name: str
    url: str
    token: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def check(self, jobs: int) -> dict[str, int]: ...


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standin:
    """tests.standin.ccbackend in its own process, answering after STANDIN_LATENCY."""

    name = STANDIN

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = "bench-token"
        self._proc: subprocess.Popen | None = None

    def start(self) -> None:
        self._proc = standin_process(STANDIN_LATENCY, self.cluster, self.token, self.port)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(30)
            self._proc = None

    def check(self, jobs: int) -> dict[str, int]:
        return {}  # what it holds is the outbox's word (every event delivered)


def standin_process(latency: float, cluster: str, token: str = "bench-token",
                    port: int = 0) -> subprocess.Popen:
    """The stand-in started, once it listens (it says so in its first line)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.standin.ccbackend", "--port", str(port), "--token",
         token, "--cluster", cluster, "--latency", str(latency), "--quiet"],
        stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


class RealCcBackend:
    """cc-backend 1.5.4 in a directory of its own (removed at :meth:`stop`); the daemon
    talks to it directly (:attr:`CcBackend.server_url`), not through the fault proxy,
    which would be the bottleneck."""

    name = CC_BACKEND

    def __init__(self, cluster: str, nodes: Nodes, commit_interval: str | None = COMMIT_INTERVAL
                 ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="ccadapter-bench-ccbackend-")
        try:
            self.server = CcBackend(Path(self._tmp.name), {cluster: nodes},
                                    commit_interval=commit_interval).prepare()
        except (pytest.skip.Exception, pytest.fail.Exception) as exc:
            # tests.ccbackend says "not built" as a test must (a skip or a failure), which
            # is no Exception: a benchmark section would end the whole run, unwritten
            self._tmp.cleanup()
            raise RuntimeError(str(exc)) from None
        self.url, self.token = self.server.server_url, self.server.token

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        self._tmp.cleanup()

    def check(self, jobs: int) -> dict[str, int]:
        """What cc-backend holds, read from its database: every job, once; raises
        otherwise. A few may stay ``running`` although their stop was answered 200: cc-backend
        1.5.4 looks a stopped job up in its job cache outside the lock its commit worker
        takes, and a commit in between makes the stop miss its job (REPORT of the
        cc-backend study, section 4; the minimal client of tests.bench.ceiling meets it
        too). They are counted, not hidden."""
        held = job_counts(self.server)
        if held["stopped"] + held["running"] + held["cached"] != jobs:
            raise RuntimeError(f"cc-backend holds {json.dumps(held)}, not {jobs} jobs")
        return held


def job_counts(cc: CcBackend) -> dict[str, int]:
    """Jobs in cc-backend's job table, stopped and running, and starts in its job cache."""
    db = sqlite3.connect(f"file:{cc.directory / 'var' / 'job.db'}?mode=ro", uri=True,
                         timeout=30)
    try:
        stopped, running = db.execute(
            "SELECT count(*) FILTER (WHERE job_state != 'running'), "
            "count(*) FILTER (WHERE job_state = 'running') FROM job").fetchone()
        (cached,) = db.execute("SELECT count(*) FROM job_cache").fetchone()
    finally:
        db.close()
    return {"stopped": stopped, "running": running, "cached": cached}
