"""Benchmark of the Prolog/Epilog fast path (issue 4), on each real test-bed cluster.

1. Latency to the start_job / stop_job request arriving at the cc-backend stand-in, for
   ``latency_jobs`` jobs per cluster (tests.bench.all's plan), SUBMIT_GAP apart, with the
   poll interval at 60 s so that polling cannot explain the figures; measured from Slurm's
   clock: the moment slurmctld ran PrologSlurmctld / EpilogSlurmctld (the test bed's hook
   wrapper stamps it before it calls the hook: ``hook_stamps`` of ``tests/testbed/slurm
   info``), and the job's StartTime/EndTime (whole seconds only, so up to 1 s high). Also
   from the hook's own send stamp (the daemon logs it at debug level).
2. Hook wall time against a bare `python3 -I -S -c pass`, run alternately (the interpreter's
   start is the floor).

Needs the test bed up with the hook: CCADAPTER_HOOK_PY=$PWD/ccadapter/prep/hook.py
tests/testbed/slurm up.  Run (holding the test bed's lock):
flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.all --only hook
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ccadapter.runtime.lastrun import LastRun
from tests.bench.scale_probe import read_stamps
from tests.integration.sync_scenario import TOKEN, DaemonProc, wait_for, write_config
from tests.integration.test_hook_live import hook_socket
from tests.integration.workload import TESTBED, sacct_truth
from tests.standin.ccbackend import CcBackendStandin

HOOK_CMD = "import sys; sys.path.insert(0, {!r}); import hook; sys.exit(hook.main())"
SUBMIT_GAP = 0.05  # seconds between two submissions of the latency benchmark
POLL = 60  # slurmPollInterval: slow enough that polling cannot explain the figures
SENT = re.compile(r"hook: job (\d+) (start|end), sent at ([\d.]+)")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def stamps_file(cluster) -> Path:
    """Where the test bed's hook wrapper notes when slurmctld ran it, for this cluster."""
    out = subprocess.run([str(TESTBED), "info"], capture_output=True, text=True, timeout=120,
                         check=True, stdin=subprocess.DEVNULL).stdout
    return Path(next(c["hook_stamps"] for c in json.loads(out) if c["cluster"] == cluster.name))


def latencies(cluster, n_jobs: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(
            TOKEN, clusters=[cluster.name]) as standin:
        cfg = write_config(cluster, standin, Path(tmp), slurmPollInterval=POLL,
                           ccPollInterval=3600, prepSockListenPath=hook_socket(cluster))
        LastRun(Path(tmp) / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, Path(tmp) / "daemon.log")
        daemon.proc = subprocess.Popen(
            [sys.executable, "-m", "ccadapter", "daemon", "--config", str(cfg),
             "--log-level", "debug"], stdout=subprocess.DEVNULL,
            stderr=daemon.log.open("w"), stdin=subprocess.DEVNULL)
        wait_for(lambda: "listening for Prolog/Epilog" in daemon.log.read_text(), 30, "up")
        time.sleep(2)
        ids = []
        for i in range(n_jobs):
            out = cluster.run("sbatch", "--parsable", "-o", "/dev/null", "-J", f"lat{i}",
                              "--wrap", f"sleep {1 + i % 3}")
            ids.append(int(out.strip().split(";")[0]))
            time.sleep(SUBMIT_GAP)
        wait_for(lambda: {b["jobId"] for b in standin.stopped()} >= set(ids), 300,
                 "not all delivered")
        daemon.terminate()
        sent = {(int(j), e): float(t) for j, e, t in SENT.findall(daemon.log.read_text())}
        arrived = {}
        for r in standin.requests():
            if r.status in (200, 201) and r.body and r.body.get("jobId") in ids:
                kind = "start" if r.path.endswith("start_job/") else "end"
                arrived.setdefault((r.body["jobId"], kind), r.time)
        truth = sacct_truth(cluster, ids)
    ran = {"start": read_stamps(stamps_file(cluster), "prolog_slurmctld"),
           "end": read_stamps(stamps_file(cluster), "epilog_slurmctld")}
    out: dict[str, list[float]] = {"start": [], "end": [], "start_slurm": [], "end_slurm": [],
                                   "start_prolog": [], "end_epilog": [], "unannounced": []}
    for job_id in ids:
        for kind in ("start", "end"):
            out[f"{kind}_slurm"].append(arrived[(job_id, kind)] - truth[job_id][kind])
            stamp = ran[kind].get(job_id)
            if stamp is not None:
                key = "start_prolog" if kind == "start" else "end_epilog"
                out[key].append(arrived[(job_id, kind)] - stamp)
            if (job_id, kind) in sent:
                out[kind].append(arrived[(job_id, kind)] - sent[(job_id, kind)])
            else:  # the hook could not tell the daemon; the run still got delivered
                out["unannounced"].append(job_id)
    return out


def hook_wall(cluster, runs: int) -> tuple[float, float]:
    """Median wall time of the hook (to a listening daemon) and of a bare interpreter."""
    hook_py = Path(__file__).resolve().parents[2] / "ccadapter" / "prep" / "hook.py"
    with tempfile.TemporaryDirectory() as tmp, CcBackendStandin(TOKEN, clusters=[
            cluster.name]) as standin:
        cfg = write_config(cluster, standin, Path(tmp), slurmPollInterval=POLL,
                           prepSockListenPath=hook_socket(cluster))
        daemon = DaemonProc(cfg, Path(tmp) / "daemon.log")
        daemon.start()
        wait_for(lambda: "listening for Prolog/Epilog" in daemon.log.read_text(), 30, "up")
        env = {"SLURM_JOB_ID": "999999", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
        hook_t, bare_t = [], []
        for _ in range(runs):
            for cmd, acc in (([sys.executable, "-I", "-S", "-c", HOOK_CMD.format(
                               str(hook_py.parent)), "--socket", hook_socket(cluster)], hook_t),
                             ([sys.executable, "-I", "-S", "-c", "pass"], bare_t)):
                t0 = time.perf_counter()
                subprocess.run(cmd, env=env, check=True, stdin=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                acc.append(time.perf_counter() - t0)
        daemon.terminate()
    return statistics.median(hook_t), statistics.median(bare_t)


if __name__ == "__main__":
    from tests.bench.all import main

    sys.exit(main(["--only", "hook", *sys.argv[1:]]))
