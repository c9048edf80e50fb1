"""Issue 5 end to end: real Slurm, the daemon (or `sync --once`) as a process, the real
cc-backend 1.5.4 (tests/ccbackend.py) and a real nats-server. What NATS received is compared
with what cc-backend took over REST: the same JSON bodies, each once. In NATS-only mode
cc-backend itself reads the subjects (``api-subjects``; its REST start/stop are off) and what
it then holds, jobs and node states, is read back through its API."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend, scheduler_state
from tests.conftest import HEAVY_VERSIONS
from tests.integration.expect import delivery_problems
from tests.integration.sync_scenario import (
    DaemonProc,
    ccadapter,
    exactly_once,
    submit_batch,
    wait_for,
    write_config,
)
from tests.integration.test_hook_live import hook_socket
from tests.integration.workload import (
    Allocation,
    Cluster,
    controller_allocations,
    het_allocations,
    het_merged,
    listed_ended,
    sacct_truth,
    submitted_allocations,
)
from tests.lineproto import parse_line
from tests.natsserver import NatsServer, add_stream, require_nats_server, stream_messages
from tests.standin.ccbackend import JOB, NODESTATE_REQUEST, STOP_REQUEST, decode_body

pytestmark = pytest.mark.integration

NATS_PASSWORD = "nats-secret-3f9d2c71"
# Every character line protocol and JSON must escape, in a real job script.
SCRIPT = ('#!/bin/sh\n# a "quoted", comma, separated \\ back\\slashed, spaced   line\n'
          'echo "a=b, c d" \'single\' \\\\ \\"\nsleep 1\n')


@pytest.fixture(autouse=True)
def _nats_server_present():
    require_nats_server()


def nats_config(server: NatsServer, **extra) -> dict:
    return {"natsServer": "127.0.0.1", "natsPort": server.port, "natsJetStream": True,
            "natsPublishTimeout": 3, **extra}


def received(url: str) -> dict[tuple[str, int, int], list[dict]]:
    """(function, jobId, startTime) -> the decoded bodies the stream holds."""
    out: dict[tuple[str, int, int], list[dict]] = {}
    for data in stream_messages(url):
        point = parse_line(data.decode())
        assert point.measurement == "job"
        assert point.tags["type"] == "node" and point.tags["type-id"] == "0"
        body = json.loads(point.fields["event"])
        struct = JOB if point.tags["function"] == "start_job" else STOP_REQUEST
        decode_body(body, None, struct)  # as strict as cc-backend's REST decoding
        key = (point.tags["function"], body["jobId"], body["startTime"])
        out.setdefault(key, []).append(body)
    return out


def nats_matches_slurm(url: str, cluster: Cluster, ids: list[int],
                       allocs: dict[int, Allocation] | None = None) -> list[str]:
    """Each run of ``ids`` Slurm started is on NATS once as started and once as stopped,
    every field as Slurm itself answers (tests/integration/expect.py), not merely as REST
    got it."""
    got = received(url)
    starts = {(k[1], k[2]): v for k, v in got.items() if k[0] == "start_job"}
    stops = {(k[1], k[2]): v for k, v in got.items() if k[0] == "stop_job"}
    truth = het_merged(sacct_truth(cluster, ids))
    known = het_allocations(truth, {**controller_allocations(cluster), **(allocs or {})})
    return delivery_problems(cluster.name, truth, starts, stops, known, where="NATS ")


def same_as_rest(cc: CcBackend, url: str, cluster: Cluster) -> list[str]:
    """Each start and stop cc-backend took over REST is in the stream once, with the same
    body."""
    got = received(url)
    problems = [f"{k}: {len(v)} copies" for k, v in got.items() if len(v) != 1]
    taken = [e.body for e in cc.requests() if (e.path, e.status) in (
        ("/api/jobs/start_job/", 201), ("/api/jobs/stop_job/", 200))
        and e.body["cluster"] == cluster.name]
    for fn, bodies in (("start_job", [b for b in taken if "user" in b]),
                       ("stop_job", [b for b in taken if "stopTime" in b])):
        for body in bodies:
            copies = got.get((fn, body["jobId"], body["startTime"]), [])
            if copies[:1] != [body]:
                problems.append(f"{fn} {body['jobId']}: NATS has {copies[:1]}")
    return problems


@pytest.mark.parametrize("workload", HEAVY_VERSIONS, indirect=True)
def test_workload_reaches_nats_once_with_rest_bodies(workload, tmp_path):
    cluster, sub = workload.sub.cluster, workload.sub
    with NatsServer(tmp_path / "nats") as server, \
            CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        add_stream(server.url)
        cfg = write_config(cluster, cc, tmp_path, **nats_config(server))
        LastRun(tmp_path / "lastrun").set(sub.submitted_at - 5)
        for _ in range(2):  # the second run finds nothing owed
            res = ccadapter("sync", "--once", "--config", str(cfg))
            assert res.returncode == 0, res.stderr
        allocs = submitted_allocations(sub)
        assert exactly_once(cc, cluster, sub.all_ids(), allocs) == []
        assert nats_matches_slurm(server.url, cluster, sub.all_ids(), allocs) == []
        assert same_as_rest(cc, server.url, cluster) == []
        assert len(received(server.url)) == cc.count("/api/jobs/start_job/", 201) + \
            cc.count("/api/jobs/stop_job/", 200)


def submit_script_job(cluster: Cluster, tmp: Path) -> int:
    root = Path(cluster.prefix[1]) if cluster.prefix else Path("/")
    script = root / "tmp" / f"ccadapter-nats-{time.time_ns()}.sh"
    script.write_text(SCRIPT)
    inside = "/" + str(script.relative_to(root))
    out = cluster.run("sbatch", "--parsable", "-J", "nats script", "-o", "/dev/null", inside)
    return int(out.strip().split(";")[0])


@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_daemon_delivers_rest_while_nats_is_down_then_notifies_once(cluster, tmp_path):
    server = NatsServer(tmp_path / "nats")  # not started: unreachable at first
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp_path, slurmPollInterval=60,
                           ccPollInterval=3600, prepSockListenPath=hook_socket(cluster),
                           natsUser="", natsPassword=NATS_PASSWORD, **nats_config(server))
        LastRun(tmp_path / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log")
        daemon.start()
        try:
            daemon.wait_listening()
            ids = [*submit_batch(cluster, "natsdown", 3), submit_script_job(cluster, tmp_path)]
            wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 60,
                     "REST delivery stalled while NATS was unreachable")
            server.start()
            add_stream(server.url)
            # (the window's overlap may bring jobs of earlier tests too: all are compared)
            wait_for(lambda: not same_as_rest(cc, server.url, cluster), 90,
                     "notifications did not follow once NATS was back")
            time.sleep(2)  # nothing more may come
            assert daemon.terminate() == 0
            assert same_as_rest(cc, server.url, cluster) == []
            assert nats_matches_slurm(server.url, cluster, ids) == []
            assert exactly_once(cc, cluster, ids) == []
            assert {k[1] for k in received(server.url)} >= set(ids)
            got = received(server.url)
            script_job = ids[-1]
            start = next(v[0] for k, v in got.items() if k[:2] == ("start_job", script_job))
            assert start["metaData"]["jobScript"] == SCRIPT
        finally:
            if daemon.proc and daemon.proc.poll() is None:
                daemon.terminate()
            server.stop()
        log = daemon.log.read_text()
        assert "Traceback" not in log
        assert cc.token not in log and NATS_PASSWORD not in log


@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_nats_only_daemon_is_durable_path(cluster, tmp_path):
    """cc-backend in NATS-only mode reads the job subject itself; it holds what Slurm ran."""
    with NatsServer(tmp_path / "nats") as server, \
            CcBackend(tmp_path / "cc-backend", [cluster], nats={"address": server.url},
                      api_subjects=("jobs", "nodestates")) as cc:
        add_stream(server.url)
        cfg = write_config(cluster, cc, tmp_path, slurmPollInterval=60,
                           ccPollInterval=3600, prepSockListenPath=hook_socket(cluster),
                           ccRestSubmitJobs=False, **nats_config(server))
        LastRun(tmp_path / "lastrun").set(time.time() - 5)
        daemon = DaemonProc(cfg, tmp_path / "daemon.log")
        daemon.start()
        try:
            ids = submit_batch(cluster, "natsonly", 4)
            wait_for(lambda: {k[1] for k in received(server.url) if k[0] == "stop_job"}
                     >= set(ids), 60, "jobs not published on NATS")
        finally:
            assert daemon.terminate() == 0
        got = received(server.url)
        assert all(len(v) == 1 for v in got.values()), got
        assert {k[1] for k in got if k[0] == "start_job"} >= set(ids)
        assert nats_matches_slurm(server.url, cluster, ids) == []
        assert cc.requests("/api/jobs/start_job/") == []  # REST jobs are off
        assert cc.requests("/api/jobs/stop_job/") == []
        wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 30,
                 "cc-backend did not take the stops from NATS")
        assert exactly_once(cc, cluster, ids) == []


def stream_points(url: str, stream: str) -> list:
    return [parse_line(data.decode()) for data in stream_messages(url, stream)]


def slurm_nodes(cluster: Cluster) -> dict[str, str]:
    """Each node's state as slurmctld answers it (``State=IDLE+DRAIN``)."""
    out = cluster.run("scontrol", "-o", "show", "node")
    return {line.split()[0].removeprefix("NodeName="): line.split(" State=", 1)[1].split()[0]
            for line in out.splitlines() if line}


@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_nats_only_sync_puts_node_states_and_jobs_on_their_subjects(cluster, tmp_path):
    """Item 3 of issue 14: a NATS-only cc-backend 1.5.4 (``api-subjects``) reads job events
    on ``subject-job-event`` and node states on ``subject-node-state``
    (internal/api/nats.go:158-192). ``sync --once`` with natsNodeStateSubject set publishes
    each on its subject, in the form that handler routes on (measurement ``job`` with a
    ``function`` tag, nats.go:251; measurement ``nodestate``, nats.go:544), JSON decoded as
    strictly as nats.go:272-274, 341-343 and 428-432 do; node states are durable (while NATS
    is down the newest waits in the outbox, older ones are replaced) and REST sees nothing."""
    server = NatsServer(tmp_path / "nats")  # not started: the first run finds NATS down
    # cc-backend connects to NATS once, at its start: it is started once NATS is up
    cc = CcBackend(tmp_path / "cc-backend", [cluster], nats={"address": server.url},
                   api_subjects=("cc.job.event", "cc.node.state")).prepare()
    try:
        cfg = write_config(cluster, cc, tmp_path, ccRestSubmitJobs=False,
                           natsSubject="cc.job.event", natsNodeStateSubject="cc.node.state",
                           **nats_config(server, natsPublishTimeout=1))
        since = time.time() - 5
        LastRun(tmp_path / "lastrun").set(since)
        ids = submit_batch(cluster, "nodestate", 2)
        wait_for(lambda: listed_ended(cluster, ids, since) == set(ids), 90, "jobs did not end")
        down = ccadapter("sync", "--once", "--config", str(cfg))
        assert down.returncode == 1 and "event(s) wait in the outbox" in down.stderr
        server.start()
        try:
            cc.start()
            add_stream(server.url, "JOBS", "cc.job.event")
            add_stream(server.url, "NODES", "cc.node.state")
            before, outputs = int(time.time()), []
            for _ in range(2):  # the second run finds no job event owed, a new node state
                res = ccadapter("sync", "--once", "--config", str(cfg))
                assert res.returncode == 0, res.stderr
                assert '"reconciler": "nodestate", "nodes"' in res.stdout, res.stdout
                outputs.append(res.stdout)
                # a snapshot is identified by its second (as the daemon's, which polls
                # slurmPollInterval >= 1 s apart): the next run takes its own
                time.sleep(1.1)
            jobs = stream_points(server.url, "JOBS")
            nodes = stream_points(server.url, "NODES")
            job_problems = nats_matches_slurm(server.url, cluster, ids)
            # what cc-backend took from the subjects: the jobs, and every node's state
            wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 30,
                     "cc-backend did not take the stops from NATS")
            held_problems = exactly_once(cc, cluster, ids)
            stored = cc.node_states(cluster.name)
            slurm = slurm_nodes(cluster)
        finally:
            server.stop()
        # neither jobs nor node states over REST: only the topology the starts are mapped
        # through (GET /api/clusters/, ccRestUrl being set for energy; issue 45)
        assert [(r.method, r.path) for r in cc.requests()
                if (r.method, r.path) != ("GET", "/api/clusters/")] == []
    finally:
        cc.stop()
    assert held_problems == []
    assert {h: n["schedulerState"] for h, n in stored.items()} == {
        h: scheduler_state(state) for h, state in slurm.items()}, (stored, slurm)
    assert {p.measurement for p in jobs} == {"job"}
    got: dict[tuple[str, int], int] = {}
    for point in jobs:
        body = json.loads(point.fields["event"])
        struct = JOB if point.tags["function"] == "start_job" else STOP_REQUEST
        decode_body(body, None, struct)
        got[(point.tags["function"], body["jobId"])] = got.get(
            (point.tags["function"], body["jobId"]), 0) + 1
    assert all(n == 1 for n in got.values()), got
    assert {(f, j) for f in ("start_job", "stop_job") for j in ids} <= set(got)
    assert job_problems == []
    # two snapshots, one per successful run: the one taken while NATS was down was replaced
    assert len(nodes) == 2, (nodes, outputs)
    for point in nodes:
        assert point.measurement == "nodestate" and point.tags == {}
        assert list(point.fields) == ["event"]
        assert before * 10**9 <= point.timestamp <= time.time() * 10**9
        body = decode_body(json.loads(point.fields["event"]), None, NODESTATE_REQUEST)
        assert body["cluster"] == cluster.name
        assert {n["hostname"] for n in body["nodes"]} == set(slurm)
        assert all(n["states"] for n in body["nodes"])
