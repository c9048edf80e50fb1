"""Metrics: every instrumentation point through the real component feeding a real registry.

Slurm commands are small shell scripts, cc-backend is the strict stand-in on 127.0.0.1, the
outbox is a real SQLite file; the registry is read the way Prometheus reads it.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ccadapter.cc.client import CcClient
from ccadapter.cc.rest_delivery import RestDelivery
from ccadapter.config.keys import Config
from ccadapter.daemon.build import build
from ccadapter.daemon.deliverer import Deliverer
from ccadapter.daemon.metrics import Metrics
from ccadapter.daemon.recorder import NoMetrics, Recorder
from ccadapter.errors import CcAdapterError, TransientSlurmError
from ccadapter.outbox import DeliveryStatus, Event, NewEvent, Outbox, Result
from ccadapter.prep import hook
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookEvent, HookMessage
from ccadapter.prep.server import PrepServer
from ccadapter.prep.tally import HookTally
from ccadapter.retry import RetryPolicy
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import SlurmRunner
from tests.fakeslurm import RecordedSlurm
from tests.standin.ccbackend import CcBackendStandin

TOKEN = "metrics-test-jwt"
T0 = 1_700_000_000


def value(metrics: Metrics, name: str, **labels: str) -> float:
    """A sample as a scrape shows it; 0 for a series not created yet."""
    return metrics.registry.get_sample_value(name, labels) or 0.0


def start_body(job: int = 1, **extra) -> dict:
    return {"jobId": job, "cluster": "c", "user": "u", "project": "p", "startTime": T0,
            "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}], **extra}


def stop_body(job: int = 1) -> dict:
    return {"jobId": job, "cluster": "c", "startTime": T0, "stopTime": T0 + 60,
            "jobState": "completed"}


def job_events(job: int = 1) -> list[NewEvent]:
    return [NewEvent("c", job, T0, "start", start_body(job)),
            NewEvent("c", job, T0, "stop", {"stop": stop_body(job)})]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def fake_bin(tmp_path):
    def make(name: str, body: str) -> str:
        path = tmp_path / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(path.parent)

    return make


# --- the no-op stand-in ------------------------------------------------------------------

def test_no_metrics_offers_every_callback_of_the_recorder():
    wanted = {n for n, _ in inspect.getmembers(Recorder, inspect.isfunction)
              if not n.startswith("_")}
    assert wanted >= {"slurm_command", "cc_request", "events_enqueued", "hook_dropped"}
    for cls in (Metrics, NoMetrics):
        for name in wanted:
            assert inspect.signature(getattr(cls, name)) == inspect.signature(
                getattr(Recorder, name)), (cls, name)


def test_registries_are_not_shared(metrics):
    other = Metrics()
    metrics.hook_received()
    assert value(metrics, "ccadapter_hook_messages_received_total", cluster="") == 1
    assert value(other, "ccadapter_hook_messages_received_total") == 0


# --- outbox: enqueued counter and the scrape-time collector ------------------------------

def test_enqueued_counts_new_events_by_kind_not_repeats(tmp_path, metrics):
    box = Outbox(tmp_path / "o.sqlite", on_enqueued=metrics.events_enqueued)
    assert box.enqueue(job_events(1)) == 2
    assert box.enqueue([*job_events(1), *job_events(2)[:1]]) == 1  # job 1 again: no-op
    box.close()
    assert value(metrics, "ccadapter_events_enqueued_total", kind="start") == 2
    assert value(metrics, "ccadapter_events_enqueued_total", kind="stop") == 1
    assert value(metrics, "ccadapter_events_enqueued_total", kind="nodestate") == 0


def test_outbox_depth_and_age_are_read_at_scrape_time(tmp_path, metrics):
    now = [1000.0]
    box = Outbox(tmp_path / "o.sqlite", clock=lambda: now[0])
    metrics.watch_outbox(box)
    assert value(metrics, "ccadapter_outbox_pending_events", kind="start") == 0
    assert value(metrics, "ccadapter_outbox_oldest_pending_age_seconds") == 0
    box.enqueue(job_events(1))
    now[0] = 1030.0
    box.enqueue(job_events(2)[:1])
    now[0] = 1100.0
    assert value(metrics, "ccadapter_outbox_pending_events", kind="start") == 2
    assert value(metrics, "ccadapter_outbox_pending_events", kind="stop") == 1
    assert value(metrics, "ccadapter_outbox_oldest_pending_age_seconds") == 100
    first = box.queue.due()[0]
    box.queue.record([Result(first.id, DeliveryStatus.REJECTED, "HTTP 400: test")])
    assert value(metrics, "ccadapter_outbox_rejected_events", kind="start") == 1
    assert value(metrics, "ccadapter_outbox_pending_events", kind="start") == 1
    box.close()


def test_scrape_survives_an_unreadable_outbox(tmp_path, metrics, caplog):
    box = Outbox(tmp_path / "o.sqlite")
    metrics.watch_outbox(box)
    box.close()
    text = _exposition(metrics)
    assert "ccadapter_outbox_pending_events" not in text
    assert "ccadapter_events_enqueued_total" in text  # the rest is still served
    assert "outbox not readable" in caplog.text


def _exposition(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


# --- delivery and cc-backend requests ----------------------------------------------------

@pytest.fixture
def standin():
    with CcBackendStandin(TOKEN, clusters=["c"]) as s:
        yield s


def test_delivered_and_rejected_by_kind_and_requests_by_status(tmp_path, standin, metrics):
    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(standin.url, TOKEN, retry=RetryPolicy(attempts=1),
                      on_request=metrics.cc_request)
    deliverer = Deliverer(box.queue, RestDelivery(client), workers=2,
                          on_result=metrics.delivery_result)
    box.enqueue([*job_events(1), NewEvent("c", 2, T0, "start", start_body(2, bogus=1))])
    stats = deliverer.run_once()
    deliverer.close()
    assert (stats.delivered, stats.rejected) == (2, 1)
    assert value(metrics, "ccadapter_events_delivered_total", kind="start") == 1
    assert value(metrics, "ccadapter_events_delivered_total", kind="stop") == 1
    assert value(metrics, "ccadapter_events_rejected_total", kind="start") == 1
    hist = "ccadapter_cc_request_duration_seconds_count"
    assert value(metrics, hist, endpoint="/api/jobs/start_job/", status="201") == 1
    assert value(metrics, hist, endpoint="/api/jobs/start_job/", status="400") == 1
    assert value(metrics, hist, endpoint="/api/jobs/stop_job/", status="200") == 1
    client.running_jobs("c")
    assert value(metrics, hist, endpoint="/api/jobs/", status="200") == 1  # no query string
    client.close()
    box.close()


def test_a_retry_later_is_neither_delivered_nor_rejected(tmp_path, standin, metrics):
    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(standin.url, TOKEN, retry=RetryPolicy(0.2, 2.0, 2),
                      on_request=metrics.cc_request)
    deliverer = Deliverer(box.queue, RestDelivery(client), workers=1,
                          on_result=metrics.delivery_result)
    standin.fail_with(503)
    box.enqueue(job_events(1)[:1])
    assert deliverer.run_once().retried == 1
    deliverer.close()
    client.close()
    box.close()
    assert value(metrics, "ccadapter_events_delivered_total", kind="start") == 0
    assert value(metrics, "ccadapter_events_rejected_total", kind="start") == 0
    assert value(metrics, "ccadapter_cc_request_duration_seconds_count",
                 endpoint="/api/jobs/start_job/", status="503") == 2  # quick retry counted


def test_no_answer_is_status_0(metrics):
    client = CcClient(f"http://127.0.0.1:{free_port()}", TOKEN, retry=RetryPolicy(attempts=1),
                      on_request=metrics.cc_request)
    assert client.send("nodestate", {"cluster": "c", "nodes": []}).status == 0
    client.close()
    assert value(metrics, "ccadapter_cc_request_duration_seconds_count",
                 endpoint="/api/nodestate/", status="0") == 1


# --- Slurm commands ----------------------------------------------------------------------

def runner(bindir: str, metrics: Metrics, **kw) -> SlurmRunner:
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return SlurmRunner(env=env, retry=RetryPolicy(0.01, 0.02, 3),
                       on_command=metrics.slurm_command, **kw)


def test_slurm_durations_and_failures_by_command(fake_bin, tmp_path, metrics):
    d = fake_bin("sinfo", "sleep 0.2; echo ok")
    fake_bin("sacct", 'echo "sacct: unrecognized option" >&2; exit 1')
    marker = tmp_path / "n"
    fake_bin("squeue", f"""
n=$(cat {marker} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {marker}
if [ $n -lt 3 ]; then echo "Unable to contact slurm controller" >&2; exit 1; fi
echo ok""")
    r = runner(d, metrics)
    r.run(["sinfo"])
    with pytest.raises(Exception, match="unrecognized"):
        r.run(["sacct", "--bogus"])
    r.run(["squeue"])
    count = "ccadapter_slurm_command_duration_seconds_count"
    fails = "ccadapter_slurm_command_failures_total"
    assert value(metrics, count, command="sinfo", cluster="") == 1
    assert value(metrics, "ccadapter_slurm_command_duration_seconds_sum",
                 command="sinfo", cluster="") >= 0.2
    assert value(metrics, fails, command="sinfo", cluster="") == 0
    assert value(metrics, count, command="sacct", cluster="") == 1
    assert value(metrics, fails, command="sacct", cluster="") == 1
    # every attempt, retries included
    assert value(metrics, count, command="squeue", cluster="") == 3
    assert value(metrics, fails, command="squeue", cluster="") == 2


def test_timeouts_and_unstartable_commands_are_failures(fake_bin, metrics):
    d = fake_bin("scontrol", "sleep 30")
    with pytest.raises(TransientSlurmError):
        runner(d, metrics, timeout=0.3).run(["scontrol", "show", "job"], retry=False)
    fails = "ccadapter_slurm_command_failures_total"
    assert value(metrics, fails, command="scontrol", cluster="") == 1
    with pytest.raises(Exception, match="cannot run"):
        SlurmRunner(prefix=["/nonexistent/chroot"], on_command=metrics.slurm_command).run(
            ["sacctmgr", "show", "user"], retry=False)
    assert value(metrics, fails, command="sacctmgr", cluster="") == 1


def test_command_given_as_a_path_is_labelled_by_its_name(metrics):
    metrics.slurm_command("/usr/bin/sacct", 0.1, True)
    assert value(metrics, "ccadapter_slurm_command_duration_seconds_count",
                 command="sacct", cluster="") == 1


# --- reconciler cycles ---------------------------------------------------------------------

def test_last_success_is_set_on_success_only(metrics):
    now = [500.0]
    metrics.clock = lambda: now[0]
    fail = [False]

    def cycle() -> dict:
        if fail[0]:
            raise RuntimeError("slurmdbd down")
        return {"new": 3}

    run = metrics.observed("slurm-window", cycle, "c1")
    assert run.__name__ == "slurm-window"
    last_ok = "ccadapter_reconciler_last_success_timestamp_seconds"
    failures = "ccadapter_reconciler_failures_total"
    assert value(metrics, last_ok, reconciler="slurm-window", cluster="c1") == 0
    assert run() == {"new": 3}
    fail[0], now[0] = True, 560.0
    with pytest.raises(RuntimeError, match="slurmdbd down"):
        run()
    assert value(metrics, last_ok, reconciler="slurm-window", cluster="c1") == 500.0
    assert value(metrics, failures, reconciler="slurm-window", cluster="c1") == 1


# --- hook messages ---------------------------------------------------------------------------

def test_hook_drops_have_a_reason(tmp_path, metrics):
    spec = f"unix:{tmp_path}/d.sock"
    got: list[HookMessage] = []

    def received(msg: HookMessage) -> None:
        metrics.hook_received()
        got.append(msg)

    tally = HookTally(on_drop=metrics.hook_dropped)  # as the daemon wires it (app.build)
    server = PrepServer([spec], "c1", received, on_drop=tally.dropped).start()
    try:
        for data in (b"garbage", b"x" * 70_000):
            _send(spec, data)
        slow = _connect(spec)
        slow.sendall(b'{"SLURM_')  # never finishes: dropped after a second
        env = {"SLURM_JOB_ID": "42", "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
        assert hook.main(["--socket", spec], env=env) == 0
        until = time.time() + 5
        while time.time() < until and value(
                metrics, "ccadapter_hook_messages_dropped_total", reason="timeout") == 0:
            time.sleep(0.02)
        slow.close()
    finally:
        server.stop()
    dropped = "ccadapter_hook_messages_dropped_total"
    assert value(metrics, dropped, reason="invalid") == 1
    assert value(metrics, dropped, reason="too_large") == 1
    assert value(metrics, dropped, reason="timeout") == 1
    assert value(metrics, "ccadapter_hook_messages_received_total", cluster="") \
        == len(got) == 1


def _connect(spec: str) -> socket.socket:
    family, address = hook.parse_spec(spec)
    s = socket.socket(family, socket.SOCK_STREAM)
    s.connect(address)
    return s


def _send(spec: str, data: bytes) -> None:
    with _connect(spec) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(16)


def test_full_fast_path_counts_received_and_dropped(tmp_path, metrics):
    box = Outbox(tmp_path / "o.sqlite")
    # Not started: nothing drains the pending set, so the second job finds it full.
    collector = Collector(RecordedSlurm("24.11", {"jobs": []}))
    tally = HookTally(on_received=metrics.hook_received, on_drop=metrics.hook_dropped)
    fast = FastPath(collector, box, lambda: None, max_pending=1,
                    on_received=tally.received, on_drop=tally.dropped)
    fast.submit(HookMessage(1, HookEvent.START, None))
    fast.submit(HookMessage(1, HookEvent.END, None))  # the same job joins its pending entry
    fast.submit(HookMessage(2, HookEvent.START, None))
    box.close()
    assert value(metrics, "ccadapter_hook_messages_received_total", cluster="") == 3
    assert value(metrics, "ccadapter_hook_messages_dropped_total",
                 reason="fast_path_full") == 1


# --- serving, and the assembly in app.build ------------------------------------------------

def scrape(port: int, host: str = "127.0.0.1") -> dict:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_serve_exposes_the_registry_over_http(metrics):
    metrics.events_enqueued("stop", 4)
    server = metrics.serve("127.0.0.1", 0)
    try:
        families = scrape(server.port)
    finally:
        server.stop()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for s in families["ccadapter_events_enqueued"].samples}
    assert samples[("ccadapter_events_enqueued_total", (("kind", "stop"),))] == 4
    assert "process_resident_memory_bytes" in families
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=2)


@pytest.fixture
def fake_slurm(fake_bin) -> str:
    """A slurmCommandPrefix answering what app.build asks (the cluster's name)."""
    d = fake_bin("fake-slurm", """
if [ "$1 $2 $3" = "scontrol show config" ]; then echo "ClusterName = c"; exit 0; fi
echo "fake-slurm: $* not recorded" >&2; exit 1""")
    return f"{d}/fake-slurm"


def app_config(tmp_path: Path, prefix: str, **extra) -> Config:
    return Config(slurmCommandPrefix=[prefix], stateDirectory=str(tmp_path / "state"),
                  lastRunPath=str(tmp_path / "lastrun"), ccRestUrl="http://127.0.0.1:9",
                  **extra)


def test_build_records_and_serves_only_when_asked_and_configured(tmp_path, fake_slurm):
    port = free_port()
    app = build(app_config(tmp_path, fake_slurm, metricsListen=f"127.0.0.1:{port}"),
                metrics=True)
    server = app.serve_metrics()
    assert server is not None and server.port == port
    try:
        app.outbox.enqueue(job_events(7))
        window = app.daemon().routines[0]
        assert window.name == "slurm-window"
        with pytest.raises(CcAdapterError, match="not recorded"):
            window.fn()  # its sacct fails on the fake: no last success
        families = scrape(port)
    finally:
        server.stop()
        app.close()
    scontrol = [s for s in families["ccadapter_slurm_command_duration_seconds"].samples
                if s.name.endswith("_count") and s.labels["command"] == "scontrol"]
    assert scontrol[0].value == 1  # build asked for the cluster name
    assert scontrol[0].labels["cluster"] == ""  # of no cluster yet: it asks which one
    assert any(s.labels == {"command": "sacct", "cluster": "c"} and s.value == 1
               for s in families["ccadapter_slurm_command_failures"].samples)
    pending = {s.labels["kind"]: s.value
               for s in families["ccadapter_outbox_pending_events"].samples}
    assert pending == {"start": 1, "stop": 1, "nodestate": 0, "energy": 0}
    assert any(s.labels["command"] == "sacct" and s.value == 1
               for s in families["ccadapter_slurm_command_failures"].samples)
    assert families["ccadapter_reconciler_last_success_timestamp_seconds"].samples == []

    for kw, cfg in (({}, {"metricsListen": f"127.0.0.1:{port}"}),  # sync --once, jobs
                    ({"metrics": True}, {})):  # the daemon without metricsListen
        app = build(app_config(tmp_path, fake_slurm, **cfg), **kw)
        assert isinstance(app.metrics, NoMetrics) and app.serve_metrics() is None
        app.close()


def test_slurm_commands_and_cycles_count_under_their_cluster(tmp_path, fake_slurm):
    """slurmClusters: every cluster has its own runner, its commands its own series."""
    cfg = app_config(tmp_path, fake_slurm, metricsListen=f"127.0.0.1:{free_port()}",
                     slurmClusters=["c", "d"])
    app = build(cfg, metrics=True)
    try:
        metrics = app.metrics
        assert isinstance(metrics, Metrics)
        daemon = app.daemon()
        for routine in daemon.routines:
            if routine.name == "slurm-window":
                with pytest.raises(CcAdapterError, match=f"--clusters {routine.cluster}"):
                    routine.fn()
    finally:
        app.close()
    fails = "ccadapter_slurm_command_failures_total"
    assert value(metrics, fails, command="sacct", cluster="c") == 1
    assert value(metrics, fails, command="sacct", cluster="d") == 1
    assert value(metrics, "ccadapter_slurm_command_duration_seconds_count",
                 command="scontrol", cluster="") == 0  # the local name is not asked
    assert value(metrics, "ccadapter_reconciler_failures_total", reconciler="slurm-window",
                 cluster="d") == 1
    assert value(metrics, "ccadapter_cluster_served", cluster="c") == 1


def test_daemon_exits_2_naming_the_key_when_it_cannot_listen(tmp_path, fake_slurm):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = app_config(tmp_path, fake_slurm, metricsListen=f"127.0.0.1:{port}",
                         pidFilePath=str(tmp_path / "d.pid"),
                         prepSockListenPath=str(tmp_path / "d.sock"))
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg.model_dump(by_alias=True)))
        res = subprocess.run([sys.executable, "-m", "ccadapter", "daemon", "--config",
                              str(path)], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, check=False)
    assert res.returncode == 2, res.stderr
    assert "'metricsListen'" in res.stderr and str(port) in res.stderr


def test_nats_notifications_by_outcome():
    metrics = Metrics()
    ev = Event(1, "c", 1, 100, "start", {}, 0, 0.0)
    for status in (DeliveryStatus.DELIVERED, DeliveryStatus.PENDING, DeliveryStatus.PENDING,
                   DeliveryStatus.REJECTED):
        metrics.nats_result(ev, Result(1, status))
    assert value(metrics, "ccadapter_nats_notifications_total", kind="start",
                 outcome="published") == 1
    assert value(metrics, "ccadapter_nats_notifications_total", kind="start",
                 outcome="retry") == 2
    assert value(metrics, "ccadapter_nats_notifications_total", kind="start",
                 outcome="rejected") == 1
