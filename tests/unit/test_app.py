"""Assembly: which way each kind of event leaves, by configuration."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ccadapter.app import EnergyProbe, build, node_state_path, node_state_warnings
from ccadapter.config import Config
from ccadapter.errors import SlurmCommandError
from ccadapter.notify.message import Message
from ccadapter.notify.nats import Published
from ccadapter.outbox import NewEvent
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
    ({"ccRestUrl": "http://cc"}, "rest", None),
    ({"ccRestUrl": "http://cc", "natsServer": "n", "natsNodeStateSubject": "cc.node.state"},
     "rest", "natsNodeStateSubject is used only when NATS is the job path"),
    ({**NATS_ONLY, "ccRestUrl": "http://cc"}, "rest", None),
    ({**NATS_ONLY, "ccRestUrl": "http://cc", "natsNodeStateSubject": "cc.node.state"},
     "nats", None),
    ({**NATS_ONLY, "natsNodeStateSubject": "cc.node.state"}, "nats", None),
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
        assert standin.node_states("c") == NODES["nodes"]
    assert [m.subject for m in published.sent] == ["cc.job.event"]


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
    with caplog.at_level(logging.INFO, "ccadapter.app"):
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
             "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}]}
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
    with caplog.at_level(logging.INFO, "ccadapter.app"):
        assert probe() is False  # not known yet: no run is read again for energy
        assert probe() is True
        assert probe() is True  # known: not asked again
    assert runner.argvs == [["scontrol", "--clusters", "b", "show", "config"]] * 2
    assert "cluster b: energy: cannot read slurmctld's config" in caplog.text
    assert "cluster b: energy: the consumed energy of each run goes into" in caplog.text
