"""Issue 14, item 1 on real Slurm: one daemon serves two clusters of one slurmdbd.

cluster22 and clusterscale share cluster22's slurmdbd; the daemon runs with
``slurmClusters: ["cluster22", "clusterscale"]`` and the host's slurm.conf (cluster22's), so
every command it runs carries ``--clusters NAME``. clusterscale is used at whatever size it
is up (a benchmark may own it: run the test under ``flock /tmp/clusterscale.lock``); only
when it is down does the test bring up a small one (4 nodes) and take it down again. Its
hook sends to its own port, a second socket of the daemon (``prepSockClusterListenPaths``),
unless that port is taken.

1. Jobs on both clusters reach the real cc-backend 1.5.4 (tests/ccbackend.py: one server, a
   cluster.json per cluster) with their own cluster's name, each held exactly once as that
   cluster's sacct shows it (read back through cc-backend's API: 0 lost, 0 duplicated).
2. clusterscale's Slurm fails (every command naming it exits 1, as when its slurmctld and
   the route to it are gone; a fault wrapper in ``slurmCommandPrefix``): cluster22's jobs
   of that time are still delivered, clusterscale's are not, and its failures are counted
   under its name in the metrics. Once it answers again, what it ran meanwhile follows.
3. ``slurmClusters: ["*"]``: the daemon serves every cluster ``sacctmgr list clusters``
   names. That includes clusters whose slurmctld is down (clusterha of the failover profile
   stays registered in the same slurmdbd when its controllers are stopped): each of those is
   served, its failing routines are its own errors in ``status`` and in the metrics, and
   cluster22's and clusterscale's jobs are delivered as in 1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ccadapter.model import cc_state
from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.conftest import unavailable
from tests.integration.sync_scenario import DaemonProc, submit_batch, wait_for
from tests.integration.test_hook_live import hook_socket
from tests.integration.workload import TESTBED, Cluster, sacct_truth

pytestmark = pytest.mark.integration
JOBS = 5  # per cluster and phase; each sleeps 1-4 s
REPO = Path(__file__).resolve().parents[2]

# Every Slurm command naming a cluster whose fault file exists fails as a command whose
# slurmctld cannot be reached does; every other command runs unchanged.
FAULT_WRAPPER = """#!/bin/sh
for arg in "$@"; do
    if [ -e "{faults}/$arg" ]; then
        echo "test fault: '$arg' can't be reached now, or it is an invalid entry for --cluster." >&2
        exit 1
    fi
done
exec "$@"
"""


def _scale_info() -> list[dict]:
    out = subprocess.run([str(TESTBED), "info", "scale"], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL, check=False)
    return json.loads(out.stdout or "[]") if out.returncode == 0 else []


@pytest.fixture(scope="module")
def clusterscale() -> Iterator[tuple[Cluster, str]]:
    """clusterscale as it is up now (any node count) and its hook's socket; when it is
    down, a small one for this module, down again afterwards: left as it was found."""
    info, ours = _scale_info(), False
    if not info:
        if os.geteuid() != 0:
            unavailable("clusterscale is down and bringing it up needs root")
        env = {**os.environ, "CCADAPTER_HOOK_PY": str(REPO / "ccadapter" / "prep" / "hook.py")}
        subprocess.run([str(TESTBED), "up", "scale", "--nodes", "4"], capture_output=True,
                       timeout=600, stdin=subprocess.DEVNULL, env=env, check=True)
        info, ours = _scale_info(), True
    c = info[0]
    try:
        yield (Cluster(c["cluster"], c["version"], tuple(c["prefix"]), tuple(c["nodes"]),
                       c["gpu_node"]), c["hook_socket"])
    finally:
        if ours:
            subprocess.run([str(TESTBED), "down", "scale"], capture_output=True, timeout=300,
                           stdin=subprocess.DEVNULL, check=False)


def port_free(spec: str) -> bool:
    host, port = spec.removeprefix("tcp:").rsplit(":", 1)
    with socket.socket() as s:
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def end_sessions(daemon_pid: int, cluster: str) -> int:
    """Kill the daemon's long-lived ``scontrol`` processes naming ``cluster``; how many.

    The fault wrapper acts when a process starts: a long-lived scontrol
    (:meth:`SlurmRunner.ask`) started before the fault passed through it already and would go
    on answering. Where the real fault strikes (its slurmctld gone), each question of such a
    process fails as a new process would, since every question connects to slurmctld afresh.
    Ending it models that: the daemon replaces it, through the wrapper, which then fails."""
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        if ppid == daemon_pid and argv[0].endswith(b"scontrol") and cluster.encode() in argv:
            os.kill(int(proc.name), signal.SIGKILL)
            killed += 1
    return killed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runs_of(cc: CcBackend, path: str, cluster: str) -> Counter[tuple[int, int]]:
    """(jobId, startTime) -> requests to ``path`` naming ``cluster`` that cc-backend accepted
    (the fault proxy's log)."""
    ok = 201 if path.endswith("start_job/") else 200
    return Counter((r.body["jobId"], r.body["startTime"]) for r in cc.requests(path)
                   if r.status == ok and r.body.get("cluster") == cluster)


def held(cc: CcBackend, cluster: str) -> tuple[Counter[tuple[int, int]], dict]:
    """What cc-backend holds of ``cluster`` (its API): jobs per run, and each stopped run's
    stop (stopTime, jobState)."""
    stops = {(b["jobId"], b["startTime"]): b for b in cc.stopped(cluster)}
    return Counter((b["jobId"], b["startTime"]) for b in cc.started(cluster)), stops


def problems(cc: CcBackend, cluster: Cluster, ids: list[int]) -> list[str]:
    """Each job as ``cluster``'s sacct shows it: one job under its name in cc-backend,
    stopped with sacct's end and state. Returns what differs."""
    truth = sacct_truth(cluster, ids)
    cc.wait_committed()
    jobs, stops = held(cc, cluster.name)
    out = [f"job {j}: not in {cluster.name}'s sacct" for j in ids if j not in truth]
    for job_id, t in truth.items():
        run = (job_id, t["start"])
        if not (t["start"] and t["nodes"]):
            if any(j == job_id for j, _ in jobs):
                out.append(f"{cluster.name} job {job_id}: never ran, yet cc-backend has it")
            continue
        if jobs[run] != 1 or run not in stops:
            out.append(f"{cluster.name} job {job_id}: {jobs[run]} jobs held, "
                       f"{'stopped' if run in stops else 'not stopped'}")
        elif (stops[run]["stopTime"], stops[run]["jobState"]) != (
                t["end"], cc_state(t["state"]).value):
            out.append(f"{cluster.name} job {job_id}: stop {stops[run]} != sacct {t}")
    return out


def duplicated(cc: CcBackend, cluster: str) -> list[tuple[int, int]]:
    """Runs of ``cluster`` held or accepted (started or stopped) more than once (any job,
    not only the test's)."""
    counts = [held(cc, cluster)[0], *(runs_of(cc, path, cluster)
                                      for path in ("/api/jobs/start_job/", "/api/jobs/stop_job/"))]
    return sorted({run for c in counts for run, n in c.items() if n > 1})


def in_all(cc: CcBackend, cluster: Cluster) -> str:
    """What cc-backend got of ``cluster`` in all: the first window reaches back
    slurmWindowOverlap (120 s) before lastRun, so jobs of a test run just before are in it."""
    starts = runs_of(cc, "/api/jobs/start_job/", cluster.name)
    stops = runs_of(cc, "/api/jobs/stop_job/", cluster.name)
    return (f"{sum(starts.values())} starts and {sum(stops.values())} stops accepted in all, "
            f"{len(starts)} and {len(stops)} distinct runs")


def delivered(cc: CcBackend, cluster: str, ids: list[int]) -> bool:
    """Does cc-backend hold each of these jobs of ``cluster`` as stopped?"""
    return set(ids) <= {job for job, _ in held(cc, cluster)[1]}


def metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.decode().splitlines():
        if line.startswith(f"{name}{{"):
            series, value = line.rsplit(" ", 1)
            got = ",".join(sorted(series[len(name) + 1:-1].split(",")))
            if got == want:
                return float(value)
    return 0.0


def status_json(config: Path) -> dict:
    """``ccadapter status --format json`` of this config, while the daemon runs."""
    out = subprocess.run(
        [sys.executable, "-m", "ccadapter", "status", "--format", "json", "--config",
         str(config)], capture_output=True, text=True, timeout=60, check=True,
        stdin=subprocess.DEVNULL)
    return json.loads(out.stdout)


def test_one_daemon_serves_two_clusters_of_one_slurmdbd(testbed, clusterscale, tmp_path):
    c22 = testbed["22.05"]
    scale, scale_hook = clusterscale
    assert c22.name == "cluster22" and not c22.prefix, "cluster22 is the host's own cluster"
    faults = tmp_path / "faults"
    faults.mkdir()
    wrapper = tmp_path / "slurm-faults"
    wrapper.write_text(FAULT_WRAPPER.format(faults=faults))
    wrapper.chmod(0o755)
    sockets = {"clusterscale": scale_hook} if port_free(scale_hook) else {}
    port = free_port()
    cfg = {"slurmPollInterval": 2, "ccPollInterval": 3600,
           "pidFilePath": str(tmp_path / "run" / "daemon.pid"),
           "prepSockListenPath": hook_socket(c22), "prepSockClusterListenPaths": sockets,
           "lastRunPath": str(tmp_path / "lastrun"), "stateDirectory": str(tmp_path / "state"),
           "slurmCommandPrefix": [str(wrapper)], "slurmCommandTimeout": 20,
           "slurmClusters": [c22.name, scale.name], "metricsListen": f"127.0.0.1:{port}"}
    both = (c22, scale)
    ids: dict[str, dict[str, list[int]]] = {c.name: {} for c in both}
    figures = []
    with CcBackend(tmp_path / "cc-backend", both) as cc:
        cfg["ccRestUrl"], cfg["ccRestJwt"] = cc.url, cc.token
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        for c in both:
            LastRun(tmp_path / f"lastrun.{c.name}").set(time.time() - 5)
        daemon = DaemonProc(path, tmp_path / "daemon.log")
        daemon.start()
        try:
            wait_for(lambda: "listening for Prolog/Epilog" in daemon.log.read_text(), 60,
                     "daemon not listening")
            # 1: both clusters answer
            t0 = time.monotonic()
            with ThreadPoolExecutor(2) as pool:
                for c, got in zip(both, pool.map(lambda c: submit_batch(c, "mc1-", JOBS),
                                                 both), strict=True):
                    ids[c.name]["both up"] = got
            for c in both:
                wait_for(lambda c=c: delivered(cc, c.name, ids[c.name]["both up"]), 60,
                         f"{c.name}: phase 1 not delivered")
            figures.append(f"both up: {2 * JOBS} jobs delivered in "
                           f"{time.monotonic() - t0:.1f} s")
            # 2: clusterscale's Slurm fails; cluster22 goes on
            (faults / scale.name).touch()
            end_sessions(daemon.proc.pid, scale.name)
            t1 = time.monotonic()
            with ThreadPoolExecutor(2) as pool:
                for c, got in zip(both, pool.map(lambda c: submit_batch(c, "mc2-", JOBS),
                                                 both), strict=True):
                    ids[c.name]["clusterscale failing"] = got
            wait_for(lambda: delivered(cc, c22.name, ids[c22.name]["clusterscale failing"]),
                     60, "cluster22: delivered nothing while clusterscale failed")
            wait_for(lambda: not scale.run("squeue", "-h", "-j", ",".join(
                map(str, ids[scale.name]["clusterscale failing"]))).strip(), 60,
                "clusterscale: phase 2 jobs still running")
            time.sleep(3)  # a poll after the last one ended: nothing of them may get through
            leaked = [j for j, _ in runs_of(cc, "/api/jobs/stop_job/", scale.name)
                      if j in ids[scale.name]["clusterscale failing"]]
            failures = metric(port, "ccadapter_reconciler_failures_total",
                              reconciler="slurm-window", cluster=scale.name)
            healthy = metric(port, "ccadapter_reconciler_failures_total",
                             reconciler="slurm-window", cluster=c22.name)
            figures.append(f"clusterscale failing: cluster22's {JOBS} jobs delivered in "
                           f"{time.monotonic() - t1:.1f} s; clusterscale: {len(leaked)} "
                           f"stops, {failures:.0f} failed windows (cluster22: {healthy:.0f})")
            # 3: clusterscale answers again: what ran meanwhile follows
            (faults / scale.name).unlink()
            t2 = time.monotonic()
            wait_for(lambda: delivered(cc, scale.name,
                                       ids[scale.name]["clusterscale failing"]),
                     60, "clusterscale: phase 2 not delivered after it answered again")
            figures.append(f"clusterscale back: its {JOBS} jobs delivered in "
                           f"{time.monotonic() - t2:.1f} s")
            doc = status_json(path)
        finally:
            exit_code = daemon.terminate()
        log = daemon.log.read_text()

        # cc-backend is read while it runs (the with block stops it)
        assert exit_code == 0
        assert "Traceback" not in log and cc.token not in log
        assert leaked == [], "clusterscale's Slurm failed, yet its jobs were delivered"
        assert failures >= 1 and healthy == 0
        assert f"slurm-window[{scale.name}] failed" in log
        for c in both:
            every = [j for phase in ids[c.name].values() for j in phase]
            assert problems(cc, c, every) == []
            sent = {j for j, _ in runs_of(cc, "/api/jobs/start_job/", c.name)}
            ran = {j for j, t in sacct_truth(c, every).items() if t["start"] and t["nodes"]}
            figures.append(f"{c.name}: {len(every)} jobs submitted, {len(ran)} ran in its sacct, "
                           f"{len(sent & set(every))} delivered under its name; {in_all(cc, c)}")
            assert sent & set(every) == ran
            assert duplicated(cc, c.name) == []
        other = [r.body.get("cluster") for r in cc.requests()
                 if isinstance(r.body, dict) and r.body.get("cluster")
                 and r.body["cluster"] not in (c22.name, scale.name)]
        assert other == []
        assert set(doc["clusters"]) == {c22.name, scale.name}
        assert all(v["served"] for v in doc["clusters"].values())
        hooks = "hook on its own socket" if sockets else "polls only (its hook port was taken)"
        figures.append(f"clusterscale: {len(scale.nodes)} nodes, {hooks}")
        print("\n" + "\n".join(figures), file=sys.stderr)


def listed_clusters() -> list[str]:
    """What `sacctmgr list clusters` names (the host's slurmdbd: cluster22's)."""
    out = subprocess.run(["sacctmgr", "-n", "-P", "list", "clusters", "format=Cluster"],
                         capture_output=True, text=True, timeout=60, check=True,
                         stdin=subprocess.DEVNULL)
    return [line for line in out.stdout.split() if line]


def unreachable(name: str) -> bool:
    """Whether ``name``'s slurmctld does not answer (`scontrol --clusters NAME ping`)."""
    out = subprocess.run(["scontrol", "--clusters", name, "ping"], capture_output=True,
                         timeout=60, stdin=subprocess.DEVNULL, check=False)
    return out.returncode != 0


def test_every_cluster_slurmdbd_names_is_served(testbed, clusterscale, tmp_path):
    c22 = testbed["22.05"]
    scale, scale_hook = clusterscale
    listed = listed_clusters()
    assert {c22.name, scale.name} <= set(listed), listed
    down = [name for name in listed if name not in (c22.name, scale.name) and unreachable(name)]
    sockets = {"clusterscale": scale_hook} if port_free(scale_hook) else {}
    port = free_port()
    cfg = {"slurmPollInterval": 2, "ccPollInterval": 3600,
           "pidFilePath": str(tmp_path / "run" / "daemon.pid"),
           "prepSockListenPath": hook_socket(c22), "prepSockClusterListenPaths": sockets,
           "lastRunPath": str(tmp_path / "lastrun"), "stateDirectory": str(tmp_path / "state"),
           "slurmCommandTimeout": 20, "slurmClusters": ["*"],
           "metricsListen": f"127.0.0.1:{port}"}
    both = (c22, scale)
    figures = [f"slurmClusters [\"*\"]: sacctmgr lists {', '.join(listed)}; "
               f"controller down: {', '.join(down) or 'none'}"]
    # cc-backend knows the two clusters that run jobs; a request naming another would be
    # refused (400) and is caught below through the proxy's log
    with CcBackend(tmp_path / "cc-backend", both) as cc:
        cfg["ccRestUrl"], cfg["ccRestJwt"] = cc.url, cc.token
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        LastRun(tmp_path / "lastrun").set(time.time() - 5)  # every cluster's seed
        daemon = DaemonProc(path, tmp_path / "daemon.log")
        daemon.start()
        try:
            daemon.wait_listening(60)
            wait_for(lambda: all(metric(port, "ccadapter_cluster_served", cluster=n) == 1
                                 for n in listed), 60, "not every listed cluster is served")
            t0 = time.monotonic()
            with ThreadPoolExecutor(2) as pool:
                ids = dict(zip([c.name for c in both],
                               pool.map(lambda c: submit_batch(c, "mcall-", JOBS), both),
                               strict=True))
            for c in both:
                wait_for(lambda c=c: delivered(cc, c.name, ids[c.name]), 60,
                         f"{c.name}: not delivered with slurmClusters [\"*\"]")
            figures.append(f"{2 * JOBS} jobs delivered in {time.monotonic() - t0:.1f} s")
            failed = {n: metric(port, "ccadapter_reconciler_failures_total",
                                reconciler="nodestate", cluster=n) for n in listed}
            doc = status_json(path)
        finally:
            exit_code = daemon.terminate()
        log = daemon.log.read_text()

        # cc-backend is read while it runs (the with block stops it)
        assert exit_code == 0
        assert "Traceback" not in log and cc.token not in log
        for c in both:
            assert problems(cc, c, ids[c.name]) == []
            sent = {j for j, _ in runs_of(cc, "/api/jobs/start_job/", c.name)}
            figures.append(f"{c.name}: {JOBS} jobs submitted, "
                           f"{len(sent & set(ids[c.name]))} delivered under its name; "
                           f"{in_all(cc, c)}")
            assert duplicated(cc, c.name) == []
        named = {r.body.get("cluster") for r in cc.requests()
                 if isinstance(r.body, dict) and r.body.get("cluster")}
        assert named <= set(listed), named
        assert set(doc["clusters"]) == set(listed)
        assert all(v["served"] for v in doc["clusters"].values())
        for c in both:
            cycles = doc["clusters"][c.name]["reconcilers"]
            assert cycles and all(r["ok"] for r in cycles.values()), (c.name, cycles)
            assert failed[c.name] == 0
        for name in down:  # its own error, no one else's
            cycles = doc["clusters"][name]["reconcilers"]
            errors = {k: r["error"] for k, r in cycles.items() if not r["ok"]}
            assert "nodestate" in errors and name in errors["nodestate"], (name, cycles)
            assert failed[name] >= 1
            assert f"nodestate[{name}] failed" in log
            figures.append(f"{name} (controller down): served, {failed[name]:.0f} failed "
                           f"nodestate cycles, status: {errors['nodestate'][:100]}")
        print("\n" + "\n".join(figures), file=sys.stderr)
