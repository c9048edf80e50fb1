"""Issue 14, item 2 on real Slurm: controller failover.

clusterha (``tests/testbed/slurm up failover``): Slurm 22.05 with two SlurmctldHost, the
primary on this host and the backup on "host" ha-backup (UTS, network and mount namespaces).
One ccadapter daemon per host, both with ``slurmctldFailover``, one lastRun file shared (as
on the shared storage slurmctld's StateSaveLocation needs anyway), an outbox each; the
backup's daemon runs in a UTS namespace named ha-backup, the primary's with this host's own
name (the default, ``socket.gethostname()``). Each listens on its own host's hook socket.

While jobs churn throughout: ``scontrol takeover`` (the backup takes control, the primary
slurmctld exits), the primary brought back (it takes control back), the primary SIGKILLed
(the backup takes control ``SlurmctldTimeout`` later), the primary brought back. After each
step the daemon beside the controller in control must work and the other report ``standby``
in ``ccadapter status`` and in ``/metrics``. At the end every submitted job is compared with
sacct: cc-backend (the real 1.5.4) holds each run once, stopped as sacct says: none lost, none
duplicated, no stop before its start. The figures (time to take over, counts) are printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.integration.sync_scenario import START, STOP, exactly_once, wait_for
from tests.integration.workload import TERMINAL, TESTBED, Cluster, sacct_truth

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
POLL = 2  # slurmPollInterval of both daemons: takeover within this after Slurm switched
CHURN_RATE = 1.0  # jobs per second, each sleeping 1..4 s


def _testbed(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run([str(TESTBED), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"tests/testbed/slurm {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


@dataclass(frozen=True)
class HaCluster:
    cluster: Cluster
    hosts: dict[str, str]  # role -> host name ("primary", "backup")
    sockets: dict[str, str]  # role -> that host's hook socket (host path)
    logs: dict[str, Path]  # role -> slurmctld log


@pytest.fixture(scope="module")
def ha() -> Iterator[HaCluster]:
    if os.geteuid() != 0:
        pytest.fail("the failover profile needs root (tests/testbed/slurm up failover)")
    env = {**os.environ, "CCADAPTER_HOOK_PY": str(REPO / "ccadapter" / "prep" / "hook.py")}
    _testbed("up", "failover", env=env)
    info = json.loads(_testbed("info", "failover", timeout=60))
    if not info:
        pytest.fail("tests/testbed/slurm info failover: clusterha is not up after up failover")
    c = info[0]
    ctlds = {x["role"]: x for x in c["controllers"]}
    yield HaCluster(Cluster(c["cluster"], c["version"], tuple(c["prefix"]), tuple(c["nodes"]),
                            c["gpu_node"]),
                    {r: x["host"] for r, x in ctlds.items()},
                    {r: x["hook_socket"] for r, x in ctlds.items()},
                    {r: Path(x["log"]) for r, x in ctlds.items()})
    _testbed("down", "failover")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    """One host's daemon: its config, process and metrics address."""

    role: str
    config: Path
    log: Path
    port: int
    argv_prefix: list[str]
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("a") as fh:
            self.proc = subprocess.Popen(
                [*self.argv_prefix, sys.executable, "-m", "ccadapter", "daemon", "--config",
                 str(self.config), "--log-level", "info"], stdout=fh, stderr=fh,
                stdin=subprocess.DEVNULL)

    def terminate(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.terminate()
        return self.proc.wait(60)

    def role_now(self) -> str | None:
        """``active`` or ``standby`` from /metrics; None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "ccadapter_role" and s.value == 1:
                    return s.labels["role"]
        return None

    def status(self) -> dict:
        out = subprocess.run([sys.executable, "-m", "ccadapter", "status", "--format", "json",
                              "--config", str(self.config)], capture_output=True, text=True,
                             timeout=60, check=True, stdin=subprocess.DEVNULL)
        return json.loads(out.stdout)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples with these labels, from /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and labels.items() <= s.labels.items())


class Churn(threading.Thread):
    """Short jobs submitted at CHURN_RATE until stopped; sbatch failing while no controller
    is in control (the moments of a switch) is counted, never counted as a job. ``hold``
    pauses submitting (the seconds before a controller is killed, see the test)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(name="failover-churn", daemon=True)
        self.cluster = cluster
        self.ids: list[int] = []
        self.failures = 0
        self.halt = threading.Event()
        self.hold = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            if self.hold.is_set():
                self.halt.wait(0.2)
                continue
            try:
                out = subprocess.run(
                    [*self.cluster.prefix, "sbatch", "--parsable", "-J", f"ha{i}", "-o",
                     "/dev/null", "--wrap", f"sleep {1 + i % 4}"],
                    capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                    check=False)
            except subprocess.TimeoutExpired:  # no controller in control for a minute
                self.failures += 1
                continue
            if out.returncode == 0:
                self.ids.append(int(out.stdout.strip().split(";")[0]))
                i += 1
            else:
                self.failures += 1
            self.halt.wait(1 / CHURN_RATE)


@dataclass
class Switch:
    step: str
    expect: str  # the role whose daemon must be active afterwards
    slurm_seconds: float | None = None  # step to the new controller's "Running as primary"
    active_seconds: float | None = None  # step to the expected host's daemon active
    daemon_seconds: float | None = None  # step to that one active and the other standby
    statuses: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return (f"{self.step}: Slurm's {self.expect} in control after {self.slurm_seconds} s; "
                f"the {self.expect}'s daemon active after {self.active_seconds} s, the other "
                f"standby after {self.daemon_seconds} s; status {self.statuses}")


def _write_config(home: Path, ha: HaCluster, cc: CcBackend, role: str,
                  shared: Path, port: int) -> Path:
    cfg = {"ccRestUrl": cc.url, "ccRestJwt": cc.token,
           "pidFilePath": str(home / "run" / "daemon.pid"),
           "prepSockListenPath": ha.sockets[role],
           "lastRunPath": str(shared / "lastrun"), "stateDirectory": str(home / "state"),
           "slurmCommandPrefix": list(ha.cluster.prefix), "slurmPollInterval": POLL,
           "ccPollInterval": 3600, "metricsListen": f"127.0.0.1:{port}",
           "slurmctldFailover": True}
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.json"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


_RUNNING = re.compile(r"^\[(\S+)\] Running as primary controller", re.M)


def _took_control(log: Path, after: float) -> float | None:
    """When that slurmctld last took control (its log, Slurm's own clock), if after ``after``."""
    stamps = [time.mktime(time.strptime(m[1].split(".")[0], "%Y-%m-%dT%H:%M:%S")) +
              float("0." + m[1].split(".")[1]) for m in _RUNNING.finditer(log.read_text())]
    return stamps[-1] if stamps and stamps[-1] >= after - 1 else None


def _switch(step: str, expect: str, act: Callable[[], None], daemons: dict[str, Daemon],
            ha: HaCluster, timeout: float = 90) -> Switch:
    """Do ``act``; wait until the ``expect`` host's daemon works and the other stands by,
    and (but at start) until that host's slurmctld took control, timing both."""
    other = "backup" if expect == "primary" else "primary"
    result = Switch(step, expect)
    t0 = time.time()
    act()
    until = t0 + timeout
    while result.daemon_seconds is None or (step != "start" and result.slurm_seconds is None):
        if time.time() > until:
            raise TimeoutError(f"{step}: {result}")
        if result.active_seconds is None and daemons[expect].role_now() == "active":
            result.active_seconds = round(time.time() - t0, 2)
        if result.daemon_seconds is None and result.active_seconds is not None and \
                daemons[other].role_now() == "standby":
            result.daemon_seconds = round(time.time() - t0, 2)
        if result.slurm_seconds is None and (took := _took_control(ha.logs[expect], t0)):
            result.slurm_seconds = round(took - t0, 2)
        time.sleep(0.25)
    result.statuses = {r: d.status()["control"]["role"] for r, d in daemons.items()}
    return result


def _quiesce(churn: Churn) -> None:
    """Before the primary slurmctld is SIGKILLed, submitting pauses for 10 s: it writes
    its state to StateSaveLocation at most every 5 s (state_save.c, SAVE_MAX_WAIT), and a
    controller that starts from it (the backup taking over, the primary coming back) knows
    nothing of what changed after the last write: a job submitted then has an id from sbatch
    but sacct lists it pending for ever, and its id is given again (slurmd then drains the
    node: "Duplicate jobid"); a job that ended then is ended again. Seen on the first run of
    this test. That is Slurm losing jobs, not ccadapter; the pause (jobs run at most 4 s,
    then one last write) keeps it out of the count. Jobs run through it and the switch."""
    churn.hold.set()
    time.sleep(10)


def _kill_primary(churn: Churn) -> None:
    _testbed("ctld", "failover", "kill", "primary")
    churn.hold.clear()


def test_failover_nothing_lost_nothing_duplicated(ha, tmp_path):
    cc = CcBackend(tmp_path / "cc-backend", [ha.cluster]).start()
    shared = tmp_path / "shared"  # the storage both hosts mount (StateSaveLocation's)
    shared.mkdir()
    LastRun(shared / "lastrun").set(time.time() - 5)
    daemons = {}
    for role in ("primary", "backup"):
        port = free_port()
        cfg = _write_config(tmp_path / role, ha, cc, role, shared, port)
        # the backup host's daemon in a UTS namespace of that host's name
        prefix = (["unshare", "--uts", "sh", "-c", f'hostname {ha.hosts["backup"]} && exec "$@"',
                   "sh"] if role == "backup" else [])
        daemons[role] = Daemon(role, cfg, tmp_path / role / "daemon.log", port, prefix)
    churn = Churn(ha.cluster)
    switches: list[Switch] = []
    exits: dict[str, int | None] = {}
    try:
        for d in daemons.values():
            d.start()
        first = _switch("start", "primary", lambda: None, daemons, ha, timeout=120)
        switches.append(first)
        churn.start()
        time.sleep(12)
        switches.append(_switch("scontrol takeover", "backup",
                                lambda: ha.cluster.run("scontrol", "takeover"), daemons, ha))
        time.sleep(12)
        switches.append(_switch("primary back", "primary",
                                lambda: _testbed("ctld", "failover", "start", "primary"),
                                daemons, ha))
        time.sleep(10)
        _quiesce(churn)
        switches.append(_switch("primary killed", "backup", lambda: _kill_primary(churn),
                                daemons, ha, timeout=150))
        time.sleep(10)
        switches.append(_switch("primary back", "primary",
                                lambda: _testbed("ctld", "failover", "start", "primary"),
                                daemons, ha))
        time.sleep(6)
        churn.halt.set()
        churn.join(120)
        ids = list(churn.ids)
        try:
            wait_for(lambda: all(r["state"] in TERMINAL
                                 for r in sacct_truth(ha.cluster, ids).values())
                     and len(sacct_truth(ha.cluster, ids)) == len(ids), 120, "")
        except TimeoutError:
            left = {i: t["state"] for i, t in sacct_truth(ha.cluster, ids).items()
                    if t["state"] not in TERMINAL}
            pytest.fail(f"churned jobs not all ended in sacct: {left}; "
                        f"{[str(s) for s in switches]}")
        started = {i for i, t in sacct_truth(ha.cluster, ids).items() if t["start"]}
        with contextlib.suppress(TimeoutError):  # the comparison below says what is missing
            wait_for(lambda: started <= {b["jobId"] for b in cc.stopped()}, 120, "")
        hooks = {r: (d.metric("ccadapter_hook_messages_received_total"),
                     d.metric("ccadapter_hook_messages_dropped_total", reason="standby"),
                     d.metric("ccadapter_events_delivered_total", kind="start"))
                 for r, d in daemons.items()}
    finally:
        churn.halt.set()
        for role, d in daemons.items():
            exits[role] = d.terminate()
        _testbed("ctld", "failover", "start", "primary")  # as the test bed had it
        ha.cluster.run("scontrol", "update", f"nodename={','.join(ha.cluster.nodes)}",
                       "state=resume", check=False)  # a drained node, should Slurm drain one

    try:  # what cc-backend holds, through its API
        problems = exactly_once(cc, ha.cluster, ids)
        held, stopped = len(cc.started(ha.cluster.name)), len(cc.stopped())
    finally:
        cc.stop()
    resent = cc.count(START, 422)
    stops_404 = cc.count(STOP, 404)
    figures = [str(s) for s in switches]
    figures.append(f"{len(ids)} jobs submitted ({churn.failures} sbatch refused during "
                   f"switches), cc-backend holds {held} jobs, {stopped} stopped; "
                   f"{cc.count(START, 201)} starts taken (201), {resent} starts and "
                   f"{cc.count(STOP, 422)} stops answered 422 (sent again), "
                   f"{stops_404} stops 404; problems: {len(problems)}")
    figures += [f"{r} daemon: {int(got)} hook messages acted on, {int(dropped)} "
                f"dropped while ccg by; {int(starts)} starts delivered"
                for r, (got, dropped, starts) in hooks.items()]
    print("\nfailover figures:\n  " + "\n  ".join(figures), file=sys.stderr)
    (tmp_path / "figures.txt").write_text("\n".join(figures) + "\n")

    assert problems == [], problems[:10]
    assert stops_404 == 0
    for s in switches:
        other = "backup" if s.expect == "primary" else "primary"
        assert s.statuses == {s.expect: "active", other: "standby"}, s
    for s in switches[1:]:
        # from Slurm's log line to its daemon working: one poll, plus the moment slurmctld
        # takes to answer pings after that line and the check's own time on a busy machine.
        # (The other daemon steps down when its Slurm command in flight returns: later, and
        # harmless, so only reported.)
        if s.slurm_seconds is not None:
            assert s.active_seconds - s.slurm_seconds <= POLL + 3, s
    for role, d in daemons.items():
        log = d.log.read_text()
        assert "Traceback" not in log and cc.token not in log, role
    assert exits == {"primary": 0, "backup": 0}
