"""Assembly: which way each kind of event leaves, by configuration."""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ccadapter.config.keys import Config
from ccadapter.config.rules import Target, node_state_path, node_state_warnings
from ccadapter.daemon.build import build
from ccadapter.daemon.cluster_sync import EnergyProbe
from ccadapter.errors import SlurmCommandError
from ccadapter.notify.message import Message
from ccadapter.notify.nats import Published
from ccadapter.outbox import NewEvent
from ccadapter.runtime.clock import Clock
from ccadapter.slurm.collector import Collector
from tests.conftest import ReplayRunner
from tests.lineproto import parse_line
from tests.standin.ccbackend import NODESTATE_REQUEST, CcBackendStandin, decode_body

TOKEN = "app-token"
NODES = {"cluster": "c", "nodes": [{"hostname": "n1", "states": ["idle"], "cpusAllocated": 0,
                                    "memoryAllocated": 0, "gpusAllocated": 0,
                                    "jobsRunning": 0}]}


def slurm(energy: str = "(null)") -> ReplayRunner:
    """What build() asks Slurm: the cluster's name and whether it gathers energy."""
    def answer(argv):
        assert list(argv) == ["scontrol", "show", "config"], argv
        return f"ClusterName = c\nAcctGatherEnergyType = {energy}\n"
    return ReplayRunner(answer)


def config(tmp_path: Path, **extra) -> Config:
    return Config(stateDirectory=str(tmp_path / "state"), lastRunPath=str(tmp_path / "lr"),
                  **extra)


NATS_ONLY = {"ccRestSubmitJobs": False, "natsServer": "127.0.0.1", "natsJetStream": True,
             "natsSubject": "cc.job.event"}


@pytest.mark.parametrize(("keys", "path", "warned"), [
    ({"ccRestUrl": "http://cc"}, Target.REST, None),
    ({"ccRestUrl": "http://cc", "natsServer": "n", "natsNodeStateSubject": "cc.node.state"},
     Target.REST, "natsNodeStateSubject is used only when NATS is the job path"),
    ({**NATS_ONLY, "ccRestUrl": "http://cc"}, Target.REST, None),
    ({**NATS_ONLY, "ccRestUrl": "http://cc", "natsNodeStateSubject": "cc.node.state"},
     Target.NATS, None),
    ({**NATS_ONLY, "natsNodeStateSubject": "cc.node.state"}, Target.NATS, None),
    (NATS_ONLY, None, "node states are not sent: set natsNodeStateSubject"),
])
def test_where_node_states_go(keys, path, warned):
    cfg = Config(**keys)
    assert node_state_path(cfg) == path
    warnings = node_state_warnings(cfg)
    assert (warnings[0].startswith(warned) if warned else warnings == []), warnings


class Recording:
    """Stands in for NatsPublisher.publish: keeps what would have been published."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def __call__(self, msg: Message) -> Published:
        self.sent.append(msg)
        return Published(True)


def job_and_node_events() -> list[NewEvent]:
    start = {"jobId": 7, "cluster": "c", "user": "u", "project": "p", "startTime": 100,
             "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}]}
    return [NewEvent("c", 7, 100, "start", start), NewEvent("c", 0, 160, "nodestate", NODES)]


def test_nats_only_with_a_node_state_subject_publishes_node_states_there(tmp_path):
    with CcBackendStandin(TOKEN, clusters=["c"]) as standin:
        app = build(config(tmp_path, ccRestUrl=standin.url, ccRestJwt=TOKEN,
                           natsNodeStateSubject="cc.node.state", **NATS_ONLY),
                    runner=slurm(), workers=2)
        assert app.publisher is not None and "nodestate" in app.reconcilers
        published = Recording()
        app.publisher.publish = published  # type: ignore[method-assign]
        try:
            app.outbox.enqueue(job_and_node_events())
            assert app.deliverer.run_once().delivered == 2
        finally:
            app.close()
        assert standin.requests() == []  # REST is neither the job nor the node-state path
    by_subject = {m.subject: parse_line(m.data.decode()) for m in published.sent}
    assert set(by_subject) == {"cc.job.event", "cc.node.state"}
    node = by_subject["cc.node.state"]
    assert node.measurement == "nodestate" and node.timestamp == 160 * 10**9
    assert decode_body(json.loads(node.fields["event"]), None, NODESTATE_REQUEST) == NODES
    assert by_subject["cc.job.event"].tags["function"] == "start_job"


def test_nats_only_without_the_subject_keeps_node_states_on_rest(tmp_path):
    with CcBackendStandin(TOKEN, clusters=["c"]) as standin:
        app = build(config(tmp_path, ccRestUrl=standin.url, ccRestJwt=TOKEN, **NATS_ONLY),
                    runner=slurm(), workers=2)
        published = Recording()
        app.publisher.publish = published  # type: ignore[union-attr,method-assign]
        try:
            app.outbox.enqueue(job_and_node_events())
            assert app.deliverer.run_once().delivered == 2
        finally:
            app.close()
        assert [r.path for r in standin.requests()] == ["/api/nodestate/"]
        held = standin.node_states("c")["n1"]  # what cc-backend holds of the node
        assert (held["schedulerState"], held["cpus_allocated"]) == ("idle", 0)
    assert [m.subject for m in published.sent] == ["cc.job.event"]


class Holding(ThreadingHTTPServer):
    """Answers every POST with 201 once ``together`` requests are held at once (or 5 s
    passed); counts the connections and the most requests it held at once."""

    def __init__(self, together: int) -> None:
        self.lock = threading.Lock()
        self.ports: set[int] = set()
        self.held = self.most_held = 0
        self.meet = threading.Barrier(together, timeout=5)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as cc-backend

            def do_POST(self) -> None:
                server = self.server
                assert isinstance(server, Holding)
                self.rfile.read(int(self.headers["Content-Length"]))
                with server.lock:
                    server.ports.add(self.client_address[1])
                    server.held += 1
                    server.most_held = max(server.most_held, server.held)
                with suppress(threading.BrokenBarrierError):
                    server.meet.wait()  # fewer at once than expected: answered late
                time.sleep(0.05)  # a request beyond the pool would be held now too
                with server.lock:
                    server.held -= 1
                self.send_response(201)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_the_connection_pool_is_sized_to_the_delivery_workers(tmp_path):
    """workers + 1 connections (a reconciler's read beside the workers), never more: a
    burst of requests waits for a free connection instead of opening another."""
    server = Holding(together=3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    app = build(config(tmp_path, ccRestUrl=f"http://127.0.0.1:{server.server_port}",
                       ccRestJwt=TOKEN), runner=slurm(), workers=2)
    body = job_and_node_events()[0].payload
    try:
        assert app.client is not None
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: app.client.send("start", body).status,
                                     range(12)))
    finally:
        app.close()
        server.shutdown()
        server.server_close()
    assert statuses == [201] * 12
    assert server.most_held == 3 and len(server.ports) == 3


def test_nats_only_without_rest_or_subject_reads_no_node_states(tmp_path):
    app = build(config(tmp_path, **NATS_ONLY), runner=slurm(), workers=1)
    try:
        assert "nodestate" not in app.reconcilers
    finally:
        app.close()


def test_rest_jobs_keep_node_states_on_rest_even_with_the_subject(tmp_path):
    app = build(config(tmp_path, ccRestUrl="http://127.0.0.1:9", natsServer="127.0.0.1",
                       natsNodeStateSubject="cc.node.state"), runner=slurm(), workers=1)
    try:
        assert "nodestate" in app.reconcilers
        assert app.outbox.notify  # start/stop notifications; node states are not among them
    finally:
        app.close()


@pytest.mark.parametrize(("plugin", "rest", "rereads", "said"), [
    ("acct_gather_energy/rapl", True, True, "goes into its metaData.energy"),
    ("acct_gather_energy/none", True, False, "slurmctld gathers none"),
    ("acct_gather_energy/rapl", False, False, "ccRestUrl is empty"),  # not even read
])
def test_energy_is_looked_for_where_it_is_gathered_and_can_be_sent(tmp_path, caplog, plugin,
                                                                   rest, rereads, said):
    keys = {"ccRestUrl": "http://127.0.0.1:9"} if rest else {**NATS_ONLY,
                                                             "natsNodeStateSubject": "n"}
    runner = slurm(plugin)
    with caplog.at_level(logging.INFO, "ccadapter.daemon.cluster_sync"):
        app = build(config(tmp_path, **keys), runner=runner, workers=1)
    try:
        assert app.collector.settings.energy is rest
        assert app.reconcilers["slurm-window"].settings.energy is rereads
        assert runner.calls["scontrol"] == 1
        (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(
            "energy: ")]
        assert said in line
    finally:
        app.close()


def test_nats_only_sends_energy_over_rest(tmp_path):
    """cc-backend's NATS API has no message for metadata; its REST edit_meta stays."""
    start = {"jobId": 7, "cluster": "c", "user": "u", "project": "p", "startTime": 100,
             "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}],
             "metaData": {"jobName": "j"}}  # as ccadapter sends it: see cc/test_rest_delivery
    stop = {"jobId": 7, "cluster": "c", "startTime": 100, "stopTime": 160,
            "jobState": "completed"}
    energy = {"jobId": 7, "cluster": "c", "startTime": 100,
              "payload": {"key": "energy", "value": "51234"}}
    with CcBackendStandin(TOKEN, clusters=["c"]) as standin:
        app = build(config(tmp_path, ccRestUrl=standin.url, ccRestJwt=TOKEN, **NATS_ONLY),
                    runner=slurm(), workers=2)
        published = Recording()
        app.publisher.publish = published  # type: ignore[union-attr,method-assign]
        # the job as cc-backend's NATS ingest would store it (the stand-in speaks REST only)
        assert app.client.send("start", start).status == 201
        assert app.client.send("stop", stop).status == 200
        try:
            app.outbox.enqueue([NewEvent("c", 7, 100, "start", start),
                                NewEvent("c", 7, 100, "stop", {"stop": stop, "start": start}),
                                NewEvent("c", 7, 100, "energy", energy)])
            assert app.deliverer.run_once().delivered == 3
        finally:
            app.close()
        assert [r.path for r in standin.requests()][2:] == ["/api/jobs/edit_meta/"]
        assert standin.jobs("c")[0]["metaData"]["energy"] == "51234"
    assert [parse_line(m.data.decode()).tags["function"] for m in published.sent] == [
        "start_job", "stop_job"]


def test_with_slurm_clusters_nothing_is_asked_of_slurmctld_at_start(tmp_path):
    """One cluster's hung or dead slurmctld must not hold up the others' start: energy is
    asked in each cluster's lane, at its first window that needs it."""
    def answer(argv):
        raise AssertionError(f"asked Slurm at start: {argv}")
    app = build(config(tmp_path, ccRestUrl="http://127.0.0.1:9", slurmClusters=["a", "b"]),
                runner=ReplayRunner(answer), workers=1)
    try:
        assert [s.name for s in app.syncs] == ["a", "b"]
        window = app.syncs[0].reconcilers["slurm-window"]
        assert isinstance(window.energy_probe, EnergyProbe)
        assert window.energy_probe is app.syncs[0].reconcilers["slurm-lookback"].energy_probe
    finally:
        app.close()


def test_a_clusters_energy_is_asked_again_until_its_slurmctld_answers(caplog):
    def answer(argv):
        if runner.calls["scontrol"] == 1:
            raise SlurmCommandError(list(argv), "exit code 1", "cannot reach 'b'")
        return "ClusterName = b\nAcctGatherEnergyType = acct_gather_energy/rapl\n"
    runner = ReplayRunner(answer)
    probe = EnergyProbe(Collector(runner, cluster="b"), "b")
    with caplog.at_level(logging.INFO, "ccadapter.daemon.cluster_sync"):
        assert probe() is False  # not known yet: no run is read again for energy
        assert probe() is True
        assert probe() is True  # known: not asked again
    assert runner.argvs == [["scontrol", "--clusters", "b", "show", "config"]] * 2
    assert "cluster b: energy: cannot read slurmctld's config" in caplog.text
    assert "cluster b: energy: the consumed energy of each run goes into" in caplog.text


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class FailoverSlurm(ReplayRunner):
    """build()'s config question, and `scontrol ping` from a recording of clusterha."""

    def __init__(self) -> None:
        super().__init__(lambda argv: "ClusterName = c\nAcctGatherEnergyType = (null)\n")
        self.ping = "primary"

    def unchecked(self, argv, **_):
        from ccadapter.slurm.runner import Completed

        assert list(argv) == ["scontrol", "ping"], argv
        return Completed((FIXTURES / "22.05" / f"scontrol-ping-{self.ping}.txt").read_text(),
                         "", 0)


def test_failover_gates_reconcilers_and_hook_messages_until_this_host_is_in_control(tmp_path):
    from ccadapter.daemon.metrics import Metrics
    from ccadapter.prep.messages import HookEvent, HookMessage

    slurm_ = FailoverSlurm()
    app = build(config(tmp_path, ccRestUrl="http://127.0.0.1:9", ccRestJwt=TOKEN,
                       slurmctldFailover=True, slurmctldHostName="ha-backup",
                       metricsListen="127.0.0.1:9102"), runner=slurm_, workers=1, metrics=True)
    try:
        assert isinstance(app.metrics, Metrics) and app.control is not None
        role = lambda r: app.metrics.registry.get_sample_value("ccadapter_role", {"role": r})  # noqa: E731
        daemon = app.daemon()
        assert [(r.name, r.gated) for r in daemon.routines][:2] == [("control", False),
                                                                    ("slurm-window", True)]
        assert all(r.gated for r in daemon.routines if r.name in app.reconcilers)
        checks = []
        server, _router = app.prep(lambda: None, lambda: checks.append(1))
        received = lambda: app.metrics.registry.get_sample_value(  # noqa: E731
            "ccadapter_hook_messages_received_total", {"cluster": "c"})
        assert (role("active"), role("standby")) == (0, 1)

        app.control.run_once()  # both up: the primary (vm) is in control
        assert not daemon.gate()
        server.on_message(HookMessage(42, HookEvent.START, None, "c"))
        assert checks == [1] and received() == 0
        assert app.metrics.registry.get_sample_value(
            "ccadapter_hook_messages_dropped_total", {"reason": "standby"}) == 1

        for key in ("slurm-window.outage_since", "slurm-window.origin"):
            app.outbox.store.set_state(key, "1.0")  # left from this outbox's last time in control
        slurm_.ping = "takeover"
        app.control.run_once()
        assert daemon.gate() and (role("active"), role("standby")) == (1, 0)
        assert app.outbox.store.get_state("slurm-window.outage_since") is None
        assert app.outbox.store.get_state("slurm-window.origin") is None
        server.on_message(HookMessage(43, HookEvent.START, None, "c"))
        assert received() == 1 and checks == [1]
        # the same counts for `status`, written by the daemon's hook-counts routine
        assert "hook-counts" in [r.name for r in daemon.routines]
        counts = app.record_hook()
        assert (counts["received"], counts["dropped"]) == (1, {"standby": 1})
        assert json.loads(app.outbox.store.get_state("hook.counts")) == counts
    finally:
        app.close()


def test_without_failover_the_daemon_always_works(tmp_path):
    from ccadapter.daemon.metrics import Metrics

    app = build(config(tmp_path, ccRestUrl="http://127.0.0.1:9", metricsListen="127.0.0.1:9102"),
                runner=slurm(), workers=1, metrics=True)
    try:
        assert app.control is None and app.daemon().gate()
        assert isinstance(app.metrics, Metrics)
        assert app.metrics.registry.get_sample_value("ccadapter_role", {"role": "active"}) == 1
    finally:
        app.close()


class FailoverClusters(FailoverSlurm):
    """slurmClusters a and b on a daemon beside clusterha's backup controller: nothing is
    asked of a or b at start, `scontrol ping` (the local cluster's) as recorded."""

    def __init__(self) -> None:
        super().__init__()

        def refuse(argv):
            raise AssertionError(f"asked Slurm at start: {argv}")

        self.answer = refuse


def test_failover_with_slurm_clusters_gates_every_clusters_lane(tmp_path):
    """The role is the daemon's: the local controllers decide it, and it gates each served
    cluster's reconcilers (in their lanes) and hook messages; a takeover clears each
    cluster's own window state, not the default mode's keys."""
    from ccadapter.prep.messages import HookEvent, HookMessage

    slurm_ = FailoverClusters()
    app = build(config(tmp_path, ccRestUrl="http://127.0.0.1:9", ccRestJwt=TOKEN,
                       slurmClusters=["a", "b"], slurmctldFailover=True,
                       slurmctldHostName="ha-backup", metricsListen="127.0.0.1:9102"),
                runner=slurm_, workers=1, metrics=True)
    try:
        assert app.control is not None
        daemon = app.daemon()
        lanes = {(r.name, r.cluster, r.gated) for r in daemon.routines}
        assert ("control", None, False) in lanes
        assert {("slurm-window", c, True) for c in "ab"} <= lanes
        assert all(r.gated == (r.cluster is not None) for r in daemon.routines)
        checks = []
        server, _router = app.prep(lambda: None, lambda: checks.append(1))
        received = lambda c: app.metrics.registry.get_sample_value(  # noqa: E731
            "ccadapter_hook_messages_received_total", {"cluster": c})

        app.control.run_once()  # the primary is in control: this daemon stands by
        assert not daemon.gate()
        server.on_message(HookMessage(42, HookEvent.START, None, "b"))
        assert checks == [1] and received("b") == 0

        for c in "ab":
            app.outbox.store.set_state(f"{c}/slurm-window.origin", "1.0")
        app.outbox.store.set_state("slurm-window.origin", "2.0")  # not a key of this mode's
        slurm_.ping = "takeover"
        app.control.run_once()
        assert daemon.gate()
        state = app.outbox.store.get_state
        assert [state(f"{c}/slurm-window.origin") for c in "ab"] == [None, None]
        assert app.outbox.store.get_state("slurm-window.origin") == "2.0"
        server.on_message(HookMessage(43, HookEvent.START, None, "b"))
        assert received("b") == 1 and checks == [1]
    finally:
        app.close()


def test_every_part_reads_the_clock_build_is_given(tmp_path):
    """The month-of-life run (issue 37) passes a site clock running faster than real time:
    the outbox, every reconciler, the delivery and the main loop must all read it, or a
    simulated month would age some of them by minutes only."""
    now, mono = 2_000_000_000.0, 5_000.0
    clock = Clock(now=lambda: now, monotonic=lambda: mono)
    app = build(config(tmp_path, ccRestUrl="http://127.0.0.1:9"), runner=slurm(), workers=1,
                clock=clock)
    readings = {"outbox": app.outbox.store.clock(), "collector": app.collector.clock()}
    for name, rec in app.reconcilers.items():
        if hasattr(rec, "clock"):
            readings[name] = rec.clock()
    readings["delivery"] = app.deliverer.deliver.clock()
    assert readings == dict.fromkeys(readings, now)
    assert {"slurm-window", "slurm-lookback", "cc-cache", "lost-stops", "nodestate"} <= \
        set(readings)
    daemon = app.daemon()
    assert (daemon.clock(), daemon.wait) == (mono, clock.wait)
    assert app.hook.clock() == mono
    app.close()
