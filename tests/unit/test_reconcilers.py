"""Reconcilers over a replayed Slurm and a real outbox."""

from zoneinfo import ZoneInfo

import pytest

from ccadapter.config import Config
from ccadapter.errors import SlurmCommandError
from ccadapter.lastrun import LastRun
from ccadapter.outbox import Outbox
from ccadapter.reconcilers.slurm_window import SlurmWindow
from ccadapter.reconcilers.stale_jobs import StaleJobs
from ccadapter.slurm.collector import Collector
from tests.conftest import ReplayRunner, fixture_json, fixture_text


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def env(tmp_path):
    meta = fixture_json("24.11", "testbed/workload.json")
    clock = Clock(meta["since"] + 300)
    state = {"sacct_down": False, "squeue": ""}
    window = fixture_text("24.11", "testbed/sacct-window.json")

    def answer(argv):
        if argv[0] == "sacct" and state["sacct_down"]:
            raise SlurmCommandError(argv, "exit code 1", "slurmdbd: Connection refused")
        if argv[0] == "sacct":
            return window
        if argv[0] == "squeue":
            return state["squeue"]
        if argv[-3:] == ["show", "job", "-d"]:
            return fixture_text("24.11", "testbed/scontrol-d-final.txt")
        return ""

    runner = ReplayRunner(answer)
    collector = Collector(runner, Config(slurmFetchJobScripts=False), clock=clock,
                          tz=ZoneInfo("UTC"), squeue_ttl=0)
    box = Outbox(tmp_path / "o.sqlite", clock=clock)
    last = LastRun(tmp_path / "lastrun")
    yield meta, clock, state, runner, collector, box, last
    box.close()


def windows(runner):
    return [a[a.index("--starttime") + 1] for a in runner.argvs if "--starttime" in a]


def test_window_enqueues_and_advances_last_run(env):
    meta, clock, _, _, collector, box, last = env
    last.set(meta["since"])
    rec = SlurmWindow(collector, box, last, Config(), clock)
    summary = rec.run_once()
    assert summary["new_events"] > 10 and last.get() == clock.now
    assert rec.run_once()["new_events"] == 0  # idempotent


def test_windows_hold_at_outage_start_until_grace_passes(env):
    meta, clock, state, runner, collector, box, last = env
    last.set(meta["since"])
    rec = SlurmWindow(collector, box, last, Config(), clock, outage_grace=600)
    state["sacct_down"] = True
    for _ in range(3):
        with pytest.raises(SlurmCommandError):
            rec.run_once()
        clock.now += 60
    state["sacct_down"] = False
    first = windows(runner)[0]
    for _ in range(12):  # sacct answers again: 11 minutes of windows from the outage start
        rec.run_once()
        clock.now += 60
    assert all(w == first for w in windows(runner)[3:15])
    rec.run_once()
    assert windows(runner)[-1] > first  # after the grace: from lastRun again


def test_lookback_never_moves_last_run_nor_reaches_before_the_first_window(env):
    meta, clock, _, _, collector, box, last = env
    last.set(meta["since"])
    lookback = SlurmWindow(collector, box, last, Config(), clock, lookback=86400)
    assert lookback.run_once() == {"skipped": "no window has run yet"}
    first = SlurmWindow(collector, box, last, Config(), clock).run_once()["since"]
    clock.now += 600
    assert lookback.run_once()["since"] == first
    assert last.get() == clock.now - 600


def test_stale_jobs_confirmed_on_two_cycles(env):
    meta, _, state, _, collector, box, _ = env
    from ccadapter.outbox import NewEvent

    gone = meta["ids"]["complete"][0]
    window = fixture_json("24.11", "testbed/sacct-window.json")
    start = next(j["time"]["start"] for j in window["jobs"] if j["job_id"] == gone)
    box.enqueue([NewEvent("cluster24", gone, start, "start", {"jobId": gone})])
    stale = StaleJobs(collector, box, "cluster24")
    state["squeue"] = f"{gone} RUNNING\n"
    assert stale.run_once()["confirmed"] == 0
    state["squeue"] = ""  # slurmctld no longer has it
    assert stale.run_once()["confirmed"] == 0  # first miss: only a suspect
    summary = stale.run_once()
    assert summary["confirmed"] == 1 and summary["stopped"] == 1
    assert box.open_runs("cluster24") == []


def test_one_squeue_serves_stale_jobs_and_nodestate(env):
    _, _, state, runner, _, _, _ = env
    shared = Collector(runner, Config(), tz=ZoneInfo("UTC"))
    state["squeue"] = "5 RUNNING n[1-2]\n6 PENDING \n7 COMPLETING n1\n"
    assert shared.active_jobs() == {5: "RUNNING", 6: "PENDING", 7: "COMPLETING"}
    _, per_host = shared.nodes()
    assert per_host == {"n1": 2, "n2": 1}
    assert runner.calls["squeue"] == 1
