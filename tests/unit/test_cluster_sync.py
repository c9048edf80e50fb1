"""Several clusters from one daemon (slurmClusters): each cluster's own sync over a shared
slurmdbd of recorded clusters, the roster of ["*"], a failing cluster beside working ones,
and hook messages routed to their cluster -- through the real components and the app's
assembly."""

import json
import logging
import socket
import threading
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ccadapter.config.keys import Config
from ccadapter.daemon.build import build
from ccadapter.daemon.cluster_sync import ClusterSync, Roster
from ccadapter.daemon.metrics import Metrics
from ccadapter.errors import SlurmCommandError
from ccadapter.model import last_run_path, scoped_key, unscoped_key
from ccadapter.ops.status import CycleLog
from ccadapter.ops.status import collect as collect_status
from ccadapter.outbox import Outbox, admin
from ccadapter.prep import hook
from ccadapter.reconcilers.slurm_window import SlurmWindow, WindowSettings
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.collector import Collector
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeclusters import SharedDbd
from tests.fakeslurm import RecordedSlurm

UTC = ZoneInfo("UTC")
VERSIONS = {"cluster24": "24.11", "cluster26": "26.05"}


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def recorded(version, clock=None, controller="final"):
    return RecordedSlurm(version, fixture_json(version, "testbed/sacct-window.json"),
                         fixture_text(version, f"testbed/scontrol-d-{controller}.txt"),
                         clock=clock)


class Empty(RecordedSlurm):
    """A cluster without jobs (its listings are empty, its node list too)."""

    def __init__(self, name, version="24.11"):
        doc = fixture_json(version, "testbed/sacct-window.json")
        super().__init__(version, {**doc, "jobs": []})
        self.name = name

    @property
    def cluster(self):
        return self.name


def empty(version="24.11"):
    return Empty("cluster", version)


def meta(version):
    return fixture_json(version, "testbed/workload.json")


def config(tmp_path, **extra):
    return Config(stateDirectory=str(tmp_path / "state"),
                  lastRunPath=str(tmp_path / "lib" / "lastrun"),
                  ccRestUrl="http://127.0.0.1:9", slurmPollInterval=1, **extra)


def with_clusters(dbd, argvs):
    """The --clusters value of each command (None: the local cluster, no --clusters)."""
    return {a[a.index("--clusters") + 1] if "--clusters" in a else None for a in argvs}


# --- each cluster's window, over one slurmdbd ----------------------------------------------

def test_each_cluster_windows_its_own_runs_and_a_failing_one_holds_back_only_itself(tmp_path):
    clock = Clock(meta("24.11")["since"] + 300)
    dbd = SharedDbd({name: recorded(v, clock) for name, v in VERSIONS.items()})
    box = Outbox(tmp_path / "o.sqlite", clock=clock)
    seed = tmp_path / "lastrun"  # cc-slurm-adapter's one file for all its clusters
    LastRun(seed).set(meta("24.11")["since"])
    windows = {}
    for name in VERSIONS:
        collector = Collector(dbd, collector_settings(slurmFetchJobScripts=False),
                              clock=clock, tz=UTC,
                              cluster=name)
        last = LastRun(last_run_path(seed, name), seed=seed)
        windows[name] = SlurmWindow(collector, box, last, WindowSettings(name, scoped=True),
                                    clock)
    dbd.down.add("cluster26")
    assert windows["cluster24"].run_once()["new_events"] > 10
    with pytest.raises(SlurmCommandError, match="cluster26"):
        windows["cluster26"].run_once()
    assert LastRun(tmp_path / "lastrun.cluster24").get() == clock.now
    assert not (tmp_path / "lastrun.cluster26").exists()  # still read from the seed
    assert windows["cluster26"].last_run.get() == meta("24.11")["since"]
    assert LastRun(seed).get() == meta("24.11")["since"]  # never written again
    assert box.store.get_state("cluster26/slurm-window.outage_since") is not None
    assert box.store.get_state("cluster24/slurm-window.outage_since") is None
    assert box.store.get_state("slurm-window.outage_since") is None
    assert {e["cluster"] for e in admin.list_events(box.store, limit=1000)} == {"cluster24"}
    dbd.down.clear()  # its slurmdbd route is back: its window catches up
    assert windows["cluster26"].run_once()["new_events"] > 10
    by_cluster = {}
    for e in admin.list_events(box.store, limit=1000):
        by_cluster.setdefault(e["cluster"], set()).add(e["jobId"])
    assert by_cluster["cluster24"] >= set(meta("24.11")["ids"]["complete"])
    assert by_cluster["cluster26"] >= set(meta("26.05")["ids"]["complete"])
    assert by_cluster["cluster24"].isdisjoint(meta("26.05")["ids"]["complete"])
    asked = dbd.by_cluster()
    assert set(asked) == {"cluster24", "cluster26"}
    for name, argvs in asked.items():
        assert with_clusters(dbd, argvs) == {name}
    box.close()


# --- the roster ------------------------------------------------------------------------

class Listing:
    def __init__(self, names):
        self.list, self.fail = list(names), False

    def names(self):
        if self.fail:
            raise SlurmCommandError(["sacctmgr"], "exit code 1", "slurmdbd down")
        return list(self.list)


def test_the_roster_of_star_follows_the_cluster_list(tmp_path):
    def make(name):
        return ClusterSync(name, True, Collector(empty(), cluster=name),
                           LastRun(tmp_path / name), {})

    listing = Listing(["a", "b"])
    roster = Roster(make, listing=listing)  # type: ignore[arg-type]
    assert roster.dynamic and roster.names() == []
    added, removed = roster.refresh()
    assert [s.name for s in added] == ["a", "b"] and removed == []
    first_a = roster.syncs["a"]
    listing.list = ["b", "c"]
    added, removed = roster.refresh()
    assert [s.name for s in added] == ["c"] and [s.name for s in removed] == ["a"]
    assert roster.names() == ["b", "c"]
    listing.fail = True
    with pytest.raises(SlurmCommandError):
        roster.refresh()
    assert roster.names() == ["b", "c"]  # a failed reading changes nothing
    listing.fail, listing.list = False, ["a", "b", "c"]
    added, _ = roster.refresh()
    assert added[0].name == "a" and added[0] is not first_a  # a new sync: its state is on disk
    fixed = Roster(make, ["x"])
    assert not fixed.dynamic and fixed.refresh() == ([], []) and fixed.names() == ["x"]


# --- the assembly ----------------------------------------------------------------------

def test_the_default_mode_is_the_local_cluster_as_before(tmp_path):
    dbd = SharedDbd({"cluster24": Empty("cluster24")})
    app = build(config(tmp_path), runner=dbd)
    try:
        (sync,) = app.syncs
        assert (sync.name, sync.scope, sync.collector.cluster) == ("cluster24", None, None)
        assert sync.last_run.path == tmp_path / "lib" / "lastrun"
        sync.reconcilers["slurm-window"].run_once()
        assert app.outbox.store.get_state("slurm-window.origin") is not None
        daemon = app.daemon()
        assert {r.cluster for r in daemon.routines} == {None}
        assert app.outbox.store.get_state("clusters.served") is None
    finally:
        app.close()
    assert with_clusters(dbd, dbd.argvs) == {None}  # not one --clusters
    assert dbd.calls["sacctmgr"] == 0


def test_named_clusters_each_get_a_sync_of_their_own(tmp_path):
    dbd = SharedDbd({"a": empty(), "b": empty("26.05")}, local="a")
    app = build(config(tmp_path, slurmClusters=["a", "b"]), runner=dbd)
    try:
        assert [(s.name, s.scope, s.collector.cluster) for s in app.syncs] == \
            [("a", "a", "a"), ("b", "b", "b")]
        for sync in app.syncs:
            for rec in sync.reconcilers.values():
                if rec.name != "cc-cache":  # cc-backend is not there
                    rec.run_once()
        daemon = app.daemon()
        lanes = {(r.name, r.cluster) for r in daemon.routines}
        assert ("slurm-window", "a") in lanes and ("nodestate", "b") in lanes
        assert ("compact", None) in lanes and ("slurm-clusters", None) not in lanes
        assert json.loads(app.outbox.store.get_state("clusters.served")) == ["a", "b"]
        assert app.outbox.store.get_state("a/slurm-window.origin") is not None
        assert app.outbox.store.get_state("slurm-window.origin") is None
        with pytest.raises(ValueError, match="2 clusters"):
            app.only()
    finally:
        app.close()
    assert (tmp_path / "lib" / "lastrun.a").exists() and (tmp_path / "lib" / "lastrun.b").exists()
    assert not (tmp_path / "lib" / "lastrun").exists()
    for name, argvs in dbd.by_cluster().items():
        assert with_clusters(dbd, argvs) == {name}
    assert dbd.calls["sacctmgr"] == 0 and "scontrol show config" not in str(dbd.argvs)


def wait_until(done, timeout=20.0):
    until = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < until, "the daemon did not get there in time"
        time.sleep(0.01)


def _windows(argvs):
    return [a for a in argvs if a[0] == "sacct" and "-P" in a]


def test_a_failing_cluster_is_reported_and_the_others_go_on(tmp_path):
    """b's Slurm fails, c's hangs (a command running into its timeout); a goes on, and
    status and metrics say which is which."""
    dbd = SharedDbd({"a": empty(), "b": empty(), "c": empty()})
    dbd.down.add("b")
    dbd.hang["c"] = threading.Event()
    port = _free_port()
    cfg = config(tmp_path, slurmClusters=["a", "b", "c"], metricsListen=f"127.0.0.1:{port}")
    app = build(cfg, runner=dbd, metrics=True)
    daemon = app.daemon()
    daemon.on_cycle = CycleLog(app.outbox)
    failures = app.metrics.registry.get_sample_value  # type: ignore[attr-defined]
    t = threading.Thread(target=daemon.run)
    t.start()
    try:
        wait_until(lambda: len(_windows(dbd.by_cluster().get("a", []))) >= 3 and (failures(
            "ccadapter_reconciler_failures_total",
            {"reconciler": "slurm-window", "cluster": "b"}) or 0) >= 2)
        asked = dbd.by_cluster()
    finally:
        dbd.hang["c"].set()  # its command comes back: the lane can end
        daemon.stop()
        t.join(30)
        app.close()
    assert not t.is_alive()
    assert len(_windows(asked["a"])) >= 3  # a window every second, while c hangs, b fails
    assert len(asked["c"]) == 1  # c is stuck in its first command
    doc = collect_status(cfg, tmp_path / "state" / "outbox.sqlite")
    clusters = doc["clusters"]
    assert [n for n in clusters] == ["a", "b", "c"]
    assert clusters["a"]["served"] is True
    assert clusters["a"]["reconcilers"]["slurm-window"]["ok"] is True
    assert clusters["b"]["reconcilers"]["slurm-window"]["ok"] is False
    assert "'b' can't be reached" in clusters["b"]["reconcilers"]["slurm-window"]["error"]
    assert clusters["b"]["lastRun"]["time"] is None
    assert clusters["a"]["lastRun"]["time"] is not None
    assert "compact" in doc["reconcilers"] and "slurm-window" not in doc["reconcilers"]
    assert isinstance(app.metrics, Metrics)
    value = app.metrics.registry.get_sample_value
    fails = "ccadapter_reconciler_failures_total"
    assert value(fails, {"reconciler": "slurm-window", "cluster": "b"}) >= 2
    assert value(fails, {"reconciler": "slurm-window", "cluster": "a"}) == 0
    assert value("ccadapter_reconciler_last_success_timestamp_seconds",
                 {"reconciler": "slurm-window", "cluster": "a"}) > 0
    assert value("ccadapter_cluster_served", {"cluster": "c"}) == 1


def test_star_serves_what_sacctmgr_lists_from_one_reading_to_the_next(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    dbd = SharedDbd({"a": empty(), "b": empty()})
    dbd.listed = ["a"]
    port = _free_port()
    cfg = config(tmp_path, slurmClusters=["*"], metricsListen=f"127.0.0.1:{port}")
    app = build(cfg, runner=dbd, metrics=True)
    try:
        assert app.syncs == []  # nothing is asked before the daemon runs
        daemon = app.daemon()
        refresh = next(r for r in daemon.routines if r.name == "slurm-clusters")
        assert (refresh.interval, refresh.retry) == (300.0, 1)
        _server, router = app.prep(daemon.wake_delivery)
        daemon.run_due()
        assert {r.cluster for r in daemon.routines} == {None, "a"}
        assert router.clusters() == ["a"]
        dbd.listed = ["b"]  # a deleted, b added with sacctmgr
        refresh.next_at = 0
        daemon.run_due()
        assert {r.cluster for r in daemon.routines} == {None, "b"}
        assert router.clusters() == ["b"]
        assert json.loads(app.outbox.store.get_state("clusters.served")) == ["b"]
        value = app.metrics.registry.get_sample_value  # type: ignore[attr-defined]
        assert value("ccadapter_cluster_served", {"cluster": "b"}) == 1
        assert value("ccadapter_cluster_served", {"cluster": "a"}) is None
        refresh.next_at = 0  # now the list itself fails: slurmdbd is away
        real = dbd._sacctmgr

        def failing(argv):
            raise SlurmCommandError(argv, "exit code 1", "Problem talking to the database")
        dbd._sacctmgr = failing  # type: ignore[method-assign]
        daemon.run_due()
        assert refresh.last_error and refresh.next_at - time.monotonic() < 2  # retry soon
        assert {r.cluster for r in daemon.routines} == {None, "b"}  # nothing changes
        dbd._sacctmgr = real  # type: ignore[method-assign]
    finally:
        app.close()
    assert "cluster a: no longer in `sacctmgr list clusters`" in caplog.text
    assert "cluster b: served from now on" in caplog.text


# --- hook messages -----------------------------------------------------------------------

def test_hook_messages_of_each_cluster_reach_its_fast_path(tmp_path):
    dbd = SharedDbd({name: recorded(v, controller="busy") for name, v in VERSIONS.items()})
    shared, own = tmp_path / "shared.sock", tmp_path / "c26.sock"
    cfg = config(tmp_path, slurmClusters=["cluster24", "cluster26"],
                 prepSockListenPath=str(shared),
                 prepSockClusterListenPaths={"cluster26": f"unix:{own}"})
    app = build(cfg, runner=dbd)
    woken = threading.Event()
    server, router = app.prep(woken.set)
    router.start()
    server.start()
    gpu24, gpu26 = meta("24.11")["ids"]["gpujob"][0], meta("26.05")["ids"]["gpujob"][0]
    try:
        env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
        # cluster24's hook sends to the shared socket, cluster26's to its own
        hook.main(["--socket", str(shared)],
                  env={**env, "SLURM_JOB_ID": str(gpu24), "SLURM_CLUSTER_NAME": "cluster24"})
        hook.main(["--socket", str(own)], env={**env, "SLURM_JOB_ID": str(gpu26)})
        hook.main(["--socket", str(shared)],  # a cluster of slurmdbd this daemon does not serve
                  env={**env, "SLURM_JOB_ID": "7", "SLURM_CLUSTER_NAME": "clusterx"})
        until = time.time() + 10
        while len(app.outbox.queue.due()) < 2 and time.time() < until:
            time.sleep(0.02)
    finally:
        server.stop()
        router.stop()
    starts = {(e.cluster, e.job_id) for e in app.outbox.queue.due()}
    app.close()
    assert starts == {("cluster24", gpu24), ("cluster26", gpu26)}
    scontrol = [a for a in dbd.argvs if a[0] == "scontrol"]
    assert with_clusters(dbd, scontrol) == {"cluster24", "cluster26"}
    assert dbd.calls["sacct"] == 0  # the fast path asks slurmctld only


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_cluster_has_its_lastrun_file_beside_lastrunpath():
    assert last_run_path("/var/lib/x/lastrun", None) == Path("/var/lib/x/lastrun")
    assert last_run_path("/var/lib/x/lastrun", "c2") == \
        Path("/var/lib/x/lastrun.c2")
    assert scoped_key("slurm-window.origin", "c2") == "c2/slurm-window.origin"
    assert scoped_key("slurm-window.origin", None) == "slurm-window.origin"
    assert unscoped_key("c2/slurm-window") == ("c2", "slurm-window")
    assert unscoped_key("compact") == (None, "compact")
