"""The scale profile of the test bed in CI size (issue 11): clusterscale with 16 nodes, 2,000
queued jobs and a churn of 50 running jobs at 2 jobs/s in the background.

``scale_testbed`` (session) brings the cluster up with ccadapter's hook on port 18890
(``tests/testbed/slurm up scale --nodes 16``) and down at the end of the session;
``scale_cluster`` (module) fills the queue, starts the churn, yields a ``ScaleBed`` and
cancels every job it submitted afterwards. The production-sized profile (128 nodes, 50,000
queued, 500 running, 5 jobs/s) is ``tests/testbed/load.py`` run by hand or by a benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.integration.workload import TESTBED, Cluster
from tests.testbed.load import JOB_NAMES, ChurnResult, FillResult, Load, Submission

REPO = Path(__file__).resolve().parents[2]
NODES = 16
QUEUED_JOBS = 2000
RUNNING = 50
RATE = 2.0  # jobs per second; each runs RUNNING / RATE = 25 s


@dataclass(frozen=True)
class ScaleCluster:
    """clusterscale as ``tests/testbed/slurm info scale`` describes it."""

    cluster: Cluster  # name "clusterscale", version 22.05.x, prefix ["env", "SLURM_CONF=..."]
    hook_socket: str  # "tcp:127.0.0.1:18890": where its PrologSlurmctld/EpilogSlurmctld send

    @property
    def hook_port(self) -> int:
        return int(self.hook_socket.rsplit(":", 1)[1])


class ScaleBed:
    """The CI-sized scale load on clusterscale, while it runs."""

    def __init__(self, scale: ScaleCluster, load: Load, record: Path, fill: FillResult,
                 churn: ChurnThread) -> None:
        self.scale, self.load, self.record, self.fill = scale, load, record, fill
        self._churn = churn

    @property
    def cluster(self) -> Cluster:
        return self.scale.cluster

    @property
    def name(self) -> str:
        return self.scale.cluster.name

    @property
    def prefix(self) -> tuple[str, ...]:
        return self.scale.cluster.prefix

    @property
    def hook_socket(self) -> str:
        return self.scale.hook_socket

    @property
    def hook_port(self) -> int:
        return self.scale.hook_port

    def stop_churn(self) -> ChurnResult:
        """Stop submitting (idempotent); running jobs run to their end. The churn's figures."""
        return self._churn.stop()

    def submitted(self, kind: str | None = None) -> list[Submission]:
        """Every job sbatch accepted so far (kind ``"queued"`` or ``"churn"``, or both)."""
        return self.load.recorder.submissions(kind)

    def submitted_ids(self, kind: str | None = None) -> set[int]:
        return {s.job_id for s in self.submitted(kind)}


class ChurnThread(threading.Thread):
    """``Load.churn`` in the background until stopped."""

    def __init__(self, load: Load, hold_queued: int) -> None:
        super().__init__(name="scale-churn", daemon=True)
        self.load, self.hold_queued = load, hold_queued
        self._stop_event = threading.Event()
        self.result: ChurnResult | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.load.churn(RUNNING, RATE, float("inf"), self._stop_event,
                                          hold_queued=self.hold_queued, check_interval=10.0)
        except BaseException as exc:  # handed to the test by stop()
            self.error = exc

    def stop(self) -> ChurnResult:
        self._stop_event.set()
        self.join(timeout=120)
        if self.error is not None:
            raise RuntimeError(f"the churn failed: {self.error!r}") from self.error
        if self.result is None:
            raise RuntimeError("the churn did not stop within 120 s")
        return self.result


def _testbed(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run([str(TESTBED), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"tests/testbed/slurm {' '.join(args)} failed:\n"
                           f"{proc.stderr[-3000:]}")
    return proc.stdout




def scale_info() -> ScaleCluster | None:
    """clusterscale as ``tests/testbed/slurm info scale`` describes it; None while it is down."""
    info = json.loads(_testbed("info", "scale", timeout=60))
    if not info:
        return None
    c = info[0]
    return ScaleCluster(Cluster(c["cluster"], c["version"], tuple(c["prefix"]),
                                tuple(c["nodes"]), c["gpu_node"],
                                hook_stamps=c.get("hook_stamps", "")), c["hook_socket"])


@pytest.fixture(scope="session")
def scale_testbed() -> Iterator[ScaleCluster]:
    """clusterscale up with 16 nodes and the hook, for the session; down afterwards."""
    if os.geteuid() != 0:
        unavailable("the scale profile needs root (tests/testbed/slurm up scale)")
    env = {**os.environ, "CCADAPTER_HOOK_PY": str(REPO / "ccadapter" / "prep" / "hook.py")}
    try:
        _testbed("up", "scale", "--nodes", str(NODES), env=env)
    except RuntimeError as exc:
        unavailable(str(exc))
    scale = scale_info()
    if scale is None:
        pytest.fail("tests/testbed/slurm info scale: clusterscale is not up after up scale")
    yield scale
    _testbed("down", "scale")


@pytest.fixture(scope="module")
def scale_cluster(scale_testbed: ScaleCluster, tmp_path_factory) -> Iterator[ScaleBed]:
    """2,000 queued jobs held, 50 running, 2 jobs/s churned, while the module runs.

    Set-up takes about half a minute; afterwards every job it submitted is cancelled."""
    record = tmp_path_factory.mktemp("scale") / "submitted.jsonl"
    load = Load(scale_testbed.cluster.prefix, record)
    load.cancel_all()  # leftovers of an interrupted run would skew the counts
    fill = load.fill(QUEUED_JOBS)
    if fill.submitted < QUEUED_JOBS:
        load.close()
        pytest.fail(f"clusterscale: {fill.submitted} of {QUEUED_JOBS} queued jobs submitted "
                    f"({fill.last_error})")
    churn = ChurnThread(load, QUEUED_JOBS)
    churn.start()
    bed = ScaleBed(scale_testbed, load, record, fill, churn)
    try:
        yield bed
    finally:
        try:
            bed.stop_churn()
        finally:
            load.cancel_all()
            _wait_no_jobs(load)
            load.close()


def _wait_no_jobs(load: Load, timeout: float = 60) -> None:
    """Until no job of the generator is pending, running or completing any more."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        out = load.run("squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%j")
        if not set(out.split()) & set(JOB_NAMES.values()):
            return
        time.sleep(1)
