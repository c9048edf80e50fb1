"""Issue 6 on real Slurm 22.05: the daemon's ``/metrics`` move with a workload, and no log
line of the run holds a secret of the config.

One run serves both tests: the real cc-backend 1.5.4 (tests/ccbackend.py; the fault proxy in
front of it logs each request, as a site's proxy would), the daemon with ``metricsListen``,
cc-backend's own JWT for its api user (new each run) and a distinctive NATS password. A few
sbatch jobs; ``/metrics`` is scraped over HTTP before and after and parsed with
prometheus_client's own parser.

The hook program is run here for each job's start and end, with the environment slurmctld
gives it, on a socket of this test's own: the counts are then exact, and the test does not
depend on whether the test bed's slurm.conf names the hook.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ccadapter.model import EventKind
from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.integration.sync_scenario import DaemonProc, submit_batch, wait_for, write_config
from tests.integration.workload import Cluster, sacct_truth

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = str(REPO / "ccadapter" / "prep")
JOBS = 4
# Random per run: a hit can only come from this run's config, never from a fixture.
NATS_SECRET = secrets.token_hex(12)
NATS_PASSWORD = f"nats-pw-{NATS_SECRET}"
Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def answered(cc: CcBackend, method: str, path: str, *statuses: int) -> int:
    """Requests to ``path`` cc-backend answered with one of these statuses (the proxy's log)."""
    return sum(1 for r in cc.requests(path) if r.method == method and r.status in statuses)


def stops_answered(cc: CcBackend) -> int:
    """The stops cc-backend took: those answered on ``stop_job``, and those of the later runs
    it refused, which go into the metaData of the run it holds (``requeuedRun.START``). The
    window of a run on a shared cluster holds other tests' requeued jobs too."""
    refused = sum(1 for r in cc.requests("/api/jobs/edit_meta/")
                  if r.method == "PATCH" and r.status == 200 and str(
                      (r.body or {}).get("payload", {}).get("key", "")).startswith("requeuedRun."))
    return answered(cc, "POST", "/api/jobs/stop_job/", 200, 422) + refused


def completed(cc: CcBackend, cluster: str) -> set[int]:
    """Ids of the jobs cc-backend holds as completed (its REST API, page by page)."""
    return {j["jobId"] for j in cc.jobs(cluster, state="completed")}


@dataclass
class Run:
    before: Samples
    after: Samples
    exposition: str
    ids: list[int]
    started: float
    daemon_log: str
    cc: CcBackend
    exit_code: int
    cluster: str  # the ``cluster`` label of per-cluster figures (the local cluster's name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _settled(now: dict, cc: CcBackend) -> bool:
    """Nothing waits in the outbox, node states included (the oldest pending age is asserted
    on the same scrape), and the daemon's counts equal what cc-backend answered."""
    if any(get(now, "ccadapter_outbox_pending_events", kind=k) for k in EventKind):
        return False
    return (get(now, "ccadapter_events_delivered_total", kind="start")
            == answered(cc, "POST", "/api/jobs/start_job/", 201, 422)
            and get(now, "ccadapter_events_delivered_total", kind="stop")
            == stops_answered(cc))


def settled_exposition(url: str, cc: CcBackend, timeout: float = 30) -> str:
    """The first scrape that finds delivery settled. A node state is enqueued every poll
    and waits some milliseconds: a later scrape could catch one pending."""
    until = time.time() + timeout
    while True:
        text = scrape(url)
        if _settled(parse(text), cc):
            return text
        if time.time() > until:
            raise TimeoutError("delivery did not settle")
        time.sleep(0.1)


def run_hook(cluster: Cluster, spec: str, job_id: int, context: str) -> None:
    """The hook as slurmctld runs it (PrologSlurmctld/EpilogSlurmctld)."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(job_id),
           "SLURM_SCRIPT_CONTEXT": context, "SLURM_CLUSTER_NAME": cluster.name}
    res = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {HOOK_DIR!r}); "
         "import hook; sys.exit(hook.main())", "--socket", spec],
        env=env, capture_output=True, text=True, timeout=10, check=False)
    assert res.returncode == 0 and res.stderr == "", res.stderr  # the daemon was told


def send_garbage(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(b"not a hook message")
        s.shutdown(socket.SHUT_WR)
        s.recv(16)


def _workload(cluster: Cluster, cc: CcBackend, tmp: Path) -> Run:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    hook_path = tmp / "hook.sock"
    cfg = write_config(cluster, cc, tmp, ccPollInterval=3600,
                       prepSockListenPath=f"unix:{hook_path}",
                       metricsListen=f"127.0.0.1:{port}",
                       # Nothing listens there: the password must stay secret all the same.
                       natsServer="127.0.0.1", natsPort=free_port(), natsUser="ccadapter",
                       natsPassword=NATS_PASSWORD)
    LastRun(tmp / "lastrun").set(time.time() - 5)
    daemon = DaemonProc(cfg, tmp / "daemon.log", log_level="debug")
    started = time.time()
    daemon.start()
    try:
        daemon.wait_listening()
        wait_for(lambda: get(parse(scrape(url)), "ccadapter_reconciler_last_success_"
                             "timestamp_seconds", reconciler="slurm-window",
                             cluster=cluster.name) > 0, 30,
                 "no slurm-window cycle in /metrics")
        before = parse(scrape(url))
        ids = submit_batch(cluster, "metrics", JOBS)
        for job_id in ids:
            run_hook(cluster, f"unix:{hook_path}", job_id, "prolog_slurmctld")
        send_garbage(hook_path)
        wait_for(lambda: len(sacct_truth(cluster, ids)) == JOBS and all(
            t["state"] == "COMPLETED" for t in sacct_truth(cluster, ids).values()), 60,
            "the jobs did not complete")
        for job_id in ids:
            run_hook(cluster, f"unix:{hook_path}", job_id, "epilog_slurmctld")
        wait_for(lambda: completed(cc, cluster.name) >= set(ids), 30,
                 "the jobs did not reach cc-backend as completed")
        exposition = settled_exposition(url, cc)
    finally:
        code = daemon.terminate()
    return Run(before, parse(exposition), exposition, ids, started, daemon.log.read_text(),
               cc, code, cluster.name)


@pytest.fixture(scope="module")
def run(testbed, tmp_path_factory) -> Run:
    cluster = testbed["22.05"]
    tmp = tmp_path_factory.mktemp("metrics")
    cc = CcBackend(tmp / "cc-backend", [cluster]).start()
    try:
        yield _workload(cluster, cc, tmp)
    finally:
        cc.stop()


def delta(run: Run, name: str, **labels: str) -> float:
    return get(run.after, name, **labels) - get(run.before, name, **labels)


def test_counters_move_with_the_workload(run):
    assert run.exit_code == 0, run.daemon_log[-2000:]
    assert delta(run, "ccadapter_events_enqueued_total", kind="start") >= JOBS
    assert delta(run, "ccadapter_events_enqueued_total", kind="stop") >= JOBS
    assert delta(run, "ccadapter_events_delivered_total", kind="start") >= JOBS
    assert delta(run, "ccadapter_events_delivered_total", kind="stop") >= JOBS
    assert get(run.after, "ccadapter_events_rejected_total", kind="start") == 0
    # Two readings of one truth: the daemon's counters and cc-backend's answers.
    assert get(run.after, "ccadapter_events_delivered_total", kind="stop") == (
        stops_answered(run.cc))
    assert delta(run, "ccadapter_cc_request_duration_seconds_count",
                 endpoint="/api/jobs/start_job/", status="201") >= JOBS
    # Slurm commands, cycles and hook messages carry the cluster they concern: in the
    # default mode the local one (slurmClusters empty).
    of = {"cluster": run.cluster}
    assert delta(run, "ccadapter_slurm_command_duration_seconds_count", command="sacct",
                 **of) >= 1
    assert delta(run, "ccadapter_slurm_command_duration_seconds_count",
                 command="scontrol", **of) >= 1  # the fast path asks slurmctld
    assert get(run.after, "ccadapter_slurm_command_failures_total", command="sacct", **of) == 0
    assert get(run.after, "ccadapter_reconciler_failures_total", reconciler="slurm-window",
               **of) == 0
    # The hook ran at each start and end: two messages per job, and one not from the hook.
    assert delta(run, "ccadapter_hook_messages_received_total", **of) == 2 * JOBS
    assert delta(run, "ccadapter_hook_messages_dropped_total", reason="invalid") == 1
    assert delta(run, "ccadapter_hook_messages_dropped_total", reason="fast_path_full") == 0
    assert get(run.after, "ccadapter_outbox_pending_events", kind="stop") == 0
    assert get(run.after, "ccadapter_outbox_oldest_pending_age_seconds") == 0
    last = get(run.after, "ccadapter_reconciler_last_success_timestamp_seconds",
               reconciler="slurm-window", **of)
    assert last > get(run.before, "ccadapter_reconciler_last_success_timestamp_seconds",
                      reconciler="slurm-window", **of) > run.started
    assert get(run.after, "process_resident_memory_bytes") > 0


def test_no_log_line_holds_a_secret(run):
    logs = {"daemon": run.daemon_log.splitlines(),
            "requests": [f"{r.method} {r.path} {r.status} {json.dumps(r.body)}"
                         for r in run.cc.requests()],
            "/metrics": run.exposition.splitlines()}
    # The grep means something only if the logs saw the secrets at work: the daemon
    # delivered with the JWT (cc-backend refuses anything else with 401).
    assert any("delivered start of job" in ln for ln in logs["daemon"])
    assert answered(run.cc, "POST", "/api/jobs/start_job/", 201) >= JOBS
    assert answered(run.cc, "POST", "/api/jobs/start_job/", 401) == 0
    assert len(logs["daemon"]) > 50  # --log-level debug: every line the daemon can write
    # the JWT's claims and signature (its header is every EdDSA token's)
    for secret in (run.cc.token.split(".", 1)[1], NATS_SECRET):
        # Any 12 characters of it: a secret cut short in a message is still a leak.
        pieces = {secret[i:i + 12] for i in range(len(secret) - 11)}
        # The report names the line, not the secret (the failure message is a log too).
        leaks = [f"{src} line {n}" for src, lines in logs.items()
                 for n, ln in enumerate(lines, 1) if any(p in ln for p in pieces)]
        assert leaks == []
