"""The operator commands through click: status, queue, backfill, recover.

A real outbox in tmp_path, Slurm replayed from the 24.11 test-bed recording (through the
CommandRunner protocol, via ``Deps``), and the strict cc-backend stand-in on 127.0.0.1."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import responses
from click.testing import CliRunner

from ccadapter.cli import Deps, main
from ccadapter.errors import OutboxError
from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, Result, admin
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import SlurmRunner
from tests.conftest import FIXTURES, collector_settings, fixture_json, fixture_text
from tests.energy import with_energy
from tests.fakeslurm import RecordedSlurm, recorded_clock
from tests.standin.ccbackend import CcBackendStandin

TOKEN = "cli-test-token-0123456789"
CLUSTER = "cluster24"
SINCE = fixture_json("24.11", "testbed/workload.json")["since"]
# the commands run at the recording's time, moving: its windows are within slurmQueryMaxSpan
# whatever today's date (the real clock put them past it 7 days after the recording)
recorded_time = recorded_clock("24.11")


class Slurm:
    """The recorded cluster, after every job of the workload ended."""

    def __init__(self) -> None:
        self.runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"),
                                    fixture_text("24.11", "testbed/scontrol-d-final.txt"))


@pytest.fixture
def standin():
    with CcBackendStandin(TOKEN, clusters=[CLUSTER]) as s:
        yield s


@pytest.fixture
def env(tmp_path, standin):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "ccRestUrl": standin.url, "ccRestJwt": TOKEN,
        "pidFilePath": str(tmp_path / "run" / "daemon.pid"),
        "prepSockListenPath": str(tmp_path / "run" / "daemon.sock"),
        "lastRunPath": str(tmp_path / "lastrun"), "stateDirectory": str(tmp_path / "state"),
        "slurmFetchJobScripts": False}))
    slurm = Slurm()
    sleeps: list[float] = []
    deps = Deps(runner=lambda config: slurm.runner, sleep=sleeps.append, clock=recorded_time)
    # a daemon ran until just before the recorded workload: windows cover it
    LastRun(tmp_path / "lastrun").set(SINCE - 60)
    return cfg, deps, slurm, sleeps


def run(env, *args: str, input: str | None = None):
    cfg, deps = env[0], env[1]
    return CliRunner().invoke(main, [*args, "--config", str(cfg)], obj=deps, input=input)


def outbox(env) -> Outbox:
    return Outbox(env[0].parent / "state" / "outbox.sqlite")


def seed(env) -> dict[str, int]:
    """Job 1 rejected (with the token in cc-backend's answer), job 2 delivered, 3 pending."""
    box = outbox(env)
    box.enqueue([NewEvent(CLUSTER, j, 100, "start", {"jobId": j}) for j in (1, 2, 3)])
    ids = {e.job_id: e.id for e in box.queue.due()}
    box.queue.record([Result(ids[1], DeliveryStatus.REJECTED, f"HTTP 400: bad token {TOKEN}"),
                Result(ids[2], DeliveryStatus.DELIVERED)])
    box.close()
    return ids


@contextmanager
def daemon_holding_lock(pid_file: Path) -> Iterator[subprocess.Popen]:
    """A live process holding the daemon's locks, like a running daemon: the outbox's (in
    the state directory beside ``run/``) and the PID file's."""
    state = pid_file.parent.parent / "state"
    config = pid_file.parent.parent / "config.json"
    code = ("from ccadapter.runtime.pidlock import PidLock\n"
            "from ccadapter.runtime.statelock import StateLock\n"
            f"state = StateLock({str(state)!r})\nstate.acquire('daemon', {str(config)!r})\n"
            f"lock = PidLock({str(pid_file)!r})\n"
            "lock.acquire()\nprint('held', flush=True)\nimport sys; sys.stdin.read()\n"
            "lock.release()\nstate.release()")  # a clean stop, as the daemon's
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline() == "held\n"
        try:
            yield proc
        finally:
            proc.stdin.close()
            proc.wait(10)


# --- jobs ------------------------------------------------------------------------------------

def test_jobs_shows_a_het_job_as_the_one_job_cc_backend_gets(env):
    res = run(env, "jobs", "--since", f"@{SINCE}", "--format", "json")
    assert res.exit_code == 0, res.output
    views = {v["jobId"]: v for v in json.loads(res.stdout)}
    leader, comp = fixture_json("24.11", "testbed/workload.json")["ids"]["hetjob"]
    assert comp not in views
    start, stop = views[leader]["startJob"], views[leader]["stopJob"]
    assert start["metaData"]["hetJobComponents"] == f"{leader}+0={leader},{leader}+1={comp}"
    assert start["numNodes"] == len(start["resources"]) == 2 and start["numAcc"] == 1
    assert (stop["jobId"], stop["startTime"]) == (leader, start["startTime"])


# --- status ----------------------------------------------------------------------------------

def test_status_json_with_the_daemon_running_and_stopped(env):
    seed(env)
    pid_file = env[0].parent / "run" / "daemon.pid"
    with daemon_holding_lock(pid_file) as proc:
        res = run(env, "status", "--format", "json")
        assert res.exit_code == 0, res.output
        running = json.loads(res.output)
        assert running["daemon"] == {"pidFile": str(pid_file), "pid": proc.pid, "alive": True,
                                     "lockHeld": True, "lockPids": [proc.pid]}
    res = run(env, "status", "--format", "json")
    stopped = json.loads(res.output)
    assert stopped["daemon"]["alive"] is False and stopped["daemon"]["lockHeld"] is False
    assert stopped["daemon"]["pid"] is None  # a clean stop removes the PID file
    box = stopped["outbox"]
    assert (box["pending"], box["rejected"], box["exists"]) == (1, 1, True)
    assert box["counts"] == {"start": {"delivered": 1, "pending": 1, "rejected": 1}}
    assert box["rejectedEvents"][0]["error"] == "HTTP 400: bad token <redacted>"
    assert set(stopped) == {"version", "time", "daemon", "lastRun", "outbox", "reconcilers",
                            "control", "hook", "unparsedRecords", "resourceNumbering"}
    assert stopped["unparsedRecords"] is None  # no record the daemon could not read
    assert stopped["hook"] is None  # no daemon has recorded the hook's counts


def test_status_never_prints_the_secret(env):
    seed(env)
    for fmt in ("json", "table"):
        res = run(env, "status", "--format", fmt)
        assert res.exit_code == 0
        assert TOKEN not in res.output and "<redacted>" in res.output


def test_status_of_an_unreadable_outbox_exits_1(env):
    state = env[0].parent / "state"
    state.mkdir()
    (state / "outbox.sqlite").write_bytes(b"garbage" * 1000)
    res = run(env, "status")
    assert res.exit_code == 1 and "cannot read the outbox" in res.output


# --- queue -----------------------------------------------------------------------------------

def test_queue_list_filters_and_formats(env):
    ids = seed(env)
    res = run(env, "queue", "list", "--status", "all", "--format", "json")
    rows = json.loads(res.output)
    assert [r["jobId"] for r in rows] == [1, 2, 3] and TOKEN not in res.output
    res = run(env, "queue", "list")  # pending, table
    assert res.exit_code == 0
    assert res.output.splitlines()[1].split()[:3] == [str(ids[3]), "start", "pending"]
    assert len(res.output.splitlines()) == 2
    res = run(env, "queue", "list", "--status", "rejected", "--kind", "stop", "--format", "json")
    assert json.loads(res.output) == []


def test_queue_commands_do_not_create_an_outbox(env):
    res = run(env, "queue", "list")
    assert res.exit_code == 1 and "no outbox at" in res.output
    assert not (env[0].parent / "state").exists()


def test_queue_retry(env):
    ids = seed(env)
    assert run(env, "queue", "retry").exit_code == 2  # neither ids nor --all-rejected
    res = run(env, "queue", "retry", "--all-rejected")
    assert res.exit_code == 0 and res.output.strip() == f"1 event(s) due now: {ids[1]}"
    res = run(env, "queue", "retry", str(ids[2]), str(ids[3]))
    assert res.exit_code == 1
    assert res.output.splitlines()[0] == f"1 event(s) due now: {ids[3]}"
    assert "not retried" in res.output and res.output.rstrip().endswith(f": {ids[2]}")
    box = outbox(env)
    assert sorted(e.job_id for e in box.queue.due()) == [1, 3]
    box.close()


def test_queue_drop_asks_and_refuses_mass_drops_without_ids(env):
    ids = seed(env)
    res = run(env, "queue", "drop")
    assert res.exit_code == 2 and "give event ids or --all-rejected" in res.output
    res = run(env, "queue", "drop", str(ids[3]), input="n\n")
    assert res.exit_code == 1 and "Drop these 1 event(s)?" in res.output
    res = run(env, "queue", "drop", str(ids[3]), str(ids[2]), "--yes")
    assert res.exit_code == 1 and "nothing dropped" in res.output  # 2 is delivered
    box = outbox(env)
    assert [e.job_id for e in box.queue.due()] == [3]
    box.close()
    res = run(env, "queue", "drop", str(ids[3]), input="y\n")
    assert res.exit_code == 0 and f"1 event(s) dropped: {ids[3]}" in res.output
    res = run(env, "queue", "drop", "--all-rejected", "--yes")
    assert res.exit_code == 0 and f"dropped: {ids[1]}" in res.output and TOKEN not in res.output
    assert "nothing to drop" in run(env, "queue", "drop", "--all-rejected", "--yes").output
    box = outbox(env)
    assert box.queue.due() == [] and admin.stats(box.store)["pending"] == 0
    box.close()


# --- the outbox's lock --------------------------------------------------------------------------

@contextmanager
def dropping(cfg: Path, event_id: int) -> Iterator[subprocess.Popen]:
    """An operator at ``queue drop``'s question: that process holds the outbox meanwhile."""
    with subprocess.Popen([sys.executable, "-m", "ccadapter", "queue", "drop", str(event_id),
                           "--config", str(cfg)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().split()[:2] == ["ID", "KIND"], proc.stderr.read()
        try:
            yield proc
        finally:
            proc.stdin.write("n\n")  # the operator says no: nothing dropped
            proc.stdin.close()
            assert proc.wait(10) == 1


def test_every_writer_is_refused_while_another_holds_the_outbox(env, standin):
    ids = seed(env)
    cfg = env[0]
    with dropping(cfg, ids[3]) as proc:
        holder = f"in use by PID {proc.pid} (ccadapter queue drop, config {cfg})"
        for args in (["sync", "--once"], ["backfill", "--since", "1h"], ["recover"],
                     ["queue", "retry", str(ids[3])], ["queue", "drop", str(ids[3]), "--yes"],
                     ["daemon"]):
            res = run(env, *args)
            assert res.exit_code == 1, (args, res.output)
            (line,) = res.output.splitlines()
            assert holder in line and "wait until it has finished" in line, args
        for args in (["status"], ["queue", "list"]):  # readers take no lock
            assert run(env, *args).exit_code == 0, args
    assert env[2].runner.calls == {}  # no refused command asked Slurm anything
    assert [r for r in standin.requests() if r.method != "GET"] == []
    box = outbox(env)
    assert [e.job_id for e in box.queue.due()] == [3]  # still pending: nothing was dropped
    box.close()
    assert run(env, "queue", "retry", str(ids[3])).exit_code == 0  # free again


def test_configs_with_their_own_last_run_have_their_own_outbox(env, tmp_path):
    """stateDirectory unset: two clusters' configs on one host do not share an outbox."""
    configs = {}
    for name in ("a", "b"):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({
            "ccRestUrl": "http://127.0.0.1:9", "ccRestJwt": TOKEN,
            "pidFilePath": str(tmp_path / name / "run" / "daemon.pid"),
            "lastRunPath": str(tmp_path / name / "lib" / "lastrun")}))
        box = Outbox(tmp_path / name / "lib" / "outbox.sqlite")
        box.enqueue([NewEvent(CLUSTER, 1, 100, "start", {"jobId": 1})])
        configs[name] = (cfg, box.queue.due()[0].id)
        box.close()
    with dropping(*configs["a"]):
        res = CliRunner().invoke(main, ["queue", "retry", str(configs["b"][1]), "--config",
                                        str(configs["b"][0])])
        assert res.exit_code == 0, res.output
        res = CliRunner().invoke(main, ["queue", "retry", str(configs["a"][1]), "--config",
                                        str(configs["a"][0])])
        assert res.exit_code == 1 and "in use by PID" in res.output


# --- sync --dry-run ----------------------------------------------------------------------------

def listed(res) -> list[dict]:
    assert res.exit_code == 0, res.output
    return [json.loads(ln) for ln in res.output.splitlines() if ln.startswith('{"event"')]


def test_dry_run_lists_every_event_the_cycle_enqueues_stops_included(env):
    last = LastRun(env[0].parent / "lastrun")
    before = last.get()
    res = run(env, "sync", "--once", "--dry-run", "--only", "slurm-window")
    events = listed(res)
    assert not (env[0].parent / "state").exists()  # nothing stored, not even an outbox
    assert last.get() == before
    kinds = [e["event"] for e in events]
    assert kinds.count("stop") > 0 and kinds.count("start") > kinds.count("stop") / 2
    assert run(env, "sync", "--once", "--only", "slurm-window").exit_code == 0
    box = outbox(env)
    stored = admin.list_events(box.store, None, None, 10_000)
    box.close()
    assert sorted((e["event"], e["jobId"], e["startTime"]) for e in events) == \
        sorted((r["kind"], r["jobId"], r["startTime"]) for r in stored)


def test_dry_run_reads_a_copy_beside_another_process_holding_the_outbox(env):
    ids = seed(env)
    box = outbox(env)
    before = admin.list_events(box.store, None, None, 10_000)
    box.close()
    with dropping(env[0], ids[3]):
        events = listed(run(env, "sync", "--once", "--dry-run", "--only", "slurm-window"))
    assert {e["event"] for e in events} == {"start", "stop"}
    assert not {e["jobId"] for e in events} & {1, 2, 3}  # the seeded ones are not new
    box = outbox(env)
    assert admin.list_events(box.store, None, None, 10_000) == before  # the real one untouched
    box.close()


# --- backfill --------------------------------------------------------------------------------

def test_backfill_enqueues_in_chunks_delivers_and_sends_nothing_twice(env, standin):
    args = ("backfill", "--since", f"@{SINCE - 60:.0f}", "--until", f"@{SINCE + 3 * 3600:.0f}",
            "--chunk-hours", "1")
    res = run(env, *args)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert [ln.split()[1] for ln in lines[:4]] == ["1/4", "2/4", "3/4", "4/4"]
    listings = [a for a in env[2].runner.argvs if "-P" in a]
    assert len(listings) == 4  # one per chunk; the runs of each read in batches
    started = len(standin.started(CLUSTER))
    assert started > 5 and "delivered" in lines[-1] and ", 0 pending" in lines[-1]
    res = run(env, *args)  # everything is known: no new event, no request
    assert res.exit_code == 0 and ", 0 new, 0 resent" in res.output.splitlines()[-2]
    assert len(standin.started(CLUSTER)) == started
    res = run(env, *args, "--resend", "--no-deliver")
    assert res.exit_code == 0 and " 0 resent" not in res.output.splitlines()[-1]
    box = outbox(env)
    assert admin.stats(box.store)["pending"] > started  # starts and stops, waiting for the daemon
    box.close()


def test_a_first_backfill_leaves_last_run_at_its_end_and_a_later_one_keeps_it(env):
    """Before the first daemon: without a lastRun the daemon's first window would begin
    slurmPollInterval before its own start, and runs that ended after the backfill's range
    and before that would never be read. A daemon's lastRun is never moved."""
    last = LastRun(env[0].parent / "lastrun")
    last.path.unlink()
    end = int(SINCE) + 3600
    res = run(env, "backfill", "--since", f"@{SINCE - 60:.0f}", "--until", f"@{end}")
    assert res.exit_code == 0, res.output
    assert last.get() == end
    last.set(end + 3600)  # a daemon ran since
    res = run(env, "backfill", "--since", f"@{SINCE - 60:.0f}", "--until", f"@{end}")
    assert res.exit_code == 0, res.output
    assert last.get() == end + 3600


def test_backfill_refuses_while_the_daemon_runs_and_checks_its_range(env):
    res = run(env, "backfill", "--since", "1h", "--until", "2h")
    assert res.exit_code == 2 and "--until must be later" in res.output
    with daemon_holding_lock(env[0].parent / "run" / "daemon.pid") as proc:
        res = run(env, "backfill", "--since", "1h")
    assert res.exit_code == 1
    assert "backfill needs the daemon stopped" in res.output and f"PID {proc.pid}" in res.output
    assert env[2].runner.calls["sacct"] == 0


# --- recover ---------------------------------------------------------------------------------

def open_run_of_a_finished_job(env) -> tuple[int, int]:
    """A run whose start we delivered and whose end we never saw (the daemon was down);
    cc-backend has lost it too (it answers the stop with 404)."""
    collector = Collector(env[2].runner, collector_settings(slurmFetchJobScripts=False))
    job = next(j for j in collector.window(SINCE - 60).jobs if j.finished and j.user)
    box = outbox(env)
    box.enqueue(events_for(job)[:1])
    box.queue.record(Result(e.id, DeliveryStatus.DELIVERED) for e in box.queue.due())
    box.close()
    return job.job_id, job.start_time


def test_recover_cleans_up_and_stops_what_slurm_ended(env, standin):
    job_id, start = open_run_of_a_finished_job(env)
    run_dir = env[0].parent / "run"
    (run_dir / "daemon.pid").parent.mkdir(exist_ok=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_dir / "daemon.pid").write_text(f"{dead.pid}\n")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(run_dir / "daemon.sock"))
    sock.close()
    res = run(env, "recover", "--stale-wait", "7")
    assert res.exit_code == 0, res.output
    assert f"PID {dead.pid} not alive" in res.output and "stale socket" in res.output
    assert not (run_dir / "daemon.pid").exists() and not (run_dir / "daemon.sock").exists()
    assert env[3] == [7.0]
    steps = [ln.split(":")[0] for ln in res.output.splitlines()[2:]]
    assert steps == ["cc-cache", "stale-jobs (first poll)", "stale-jobs (second poll)",
                     "delivery"]
    assert '"stopped": 1' in res.output
    assert [(b["jobId"], b["startTime"]) for b in standin.stopped()] == [(job_id, start)]
    assert standin.requests("/api/jobs/")  # cc-backend's running jobs were asked for


def test_recover_refuses_while_the_daemon_runs(env):
    pid_file = env[0].parent / "run" / "daemon.pid"
    with daemon_holding_lock(pid_file) as proc:
        res = run(env, "recover")
        assert res.exit_code == 1
        assert f"recover refused: the daemon is running (PID {proc.pid})" in res.output
        assert pid_file.read_text() == f"{proc.pid}\n"
    assert env[2].runner.calls == {}


# --- failures the environment causes: one line, a documented exit code, no traceback ----------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_config(env, **changes) -> tuple:
    """``env`` with its config file changed."""
    cfg = env[0]
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), **changes}))
    return env


def errors_of(res) -> list[str]:
    """The error lines a command printed; it must have ended by itself, not by a traceback."""
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output and TOKEN not in res.output
    return [ln for ln in res.output.splitlines() if ln.startswith("error: ")]


ONE_SHOTS = [("sync", "--once"), ("sync", "--once", "--dry-run"),
             ("backfill", "--since", f"@{SINCE - 60:.0f}", "--until", f"@{SINCE + 3600:.0f}"),
             ("recover", "--stale-wait", "0")]


@pytest.mark.parametrize("args", ONE_SHOTS, ids=lambda a: " ".join(a[:2]))
def test_cc_backend_down_is_one_line_naming_the_address(env, args):
    url = f"http://127.0.0.1:{free_port()}"
    with_config(env, ccRestUrl=url)
    res = run(env, *args)
    assert res.exit_code == 1
    lines = errors_of(res)
    assert lines and all(f"cc-backend {url} (ccRestUrl): " in ln and "connection refused; "
                         "is cc-backend running there? check ccRestUrl" in ln for ln in lines)


def test_sync_goes_on_after_a_failing_reconciler_and_says_what_waits(env):
    with_config(env, ccRestUrl=f"http://127.0.0.1:{free_port()}")
    res = run(env, "sync", "--once")
    assert res.exit_code == 1
    out = [json.loads(ln) for ln in res.output.splitlines() if ln.startswith("{")]
    assert [o.get("reconciler") for o in out[:-1]] == list(
        ("slurm-window", "slurm-lookback", "stale-jobs", "cc-cache", "lost-stops", "nodestate"))
    assert "error" in out[3] and out[0]["new_events"] > 0  # the window is stored all the same
    first, second = errors_of(res)
    assert first.startswith("error: cc-cache: cc-backend http://127.0.0.1:")
    pending = admin.stats(outbox(env).store)["pending"]
    assert second.startswith("error: events not delivered: cc-backend") and \
        second.endswith(f"; {pending} event(s) wait in the outbox for the daemon (or the "
                        "next run)")


def test_a_tls_port_that_is_not_tls(env, standin):
    with_config(env, ccRestUrl=standin.url.replace("http://", "https://"))
    res = run(env, "sync", "--once", "--only", "cc-cache")
    assert res.exit_code == 1
    (line,) = errors_of(res)
    assert "TLS handshake failed" in line and "does that port speak TLS?" in line


@responses.activate
def test_cc_backend_answers_are_scrubbed_of_secrets(env):
    url = "http://cc.example.org"
    with_config(env, ccRestUrl=url)
    responses.get(url + "/api/jobs/", status=401, body=f"token {TOKEN} has expired")
    res = run(env, "sync", "--once", "--only", "cc-cache")
    assert res.exit_code == 1
    (line,) = errors_of(res)
    assert "HTTP 401 token <redacted> has expired; cc-backend refused our token: check " \
        "ccRestJwt" in line


@pytest.mark.parametrize("args", [*ONE_SHOTS, ("jobs",), ("daemon",)],
                         ids=lambda a: " ".join(a[:2]))
def test_slurm_commands_missing(env, args):
    cfg, _, _, sleeps = with_config(env, slurmCommandPrefix=["/nonexistent/slurm"])
    deps = Deps(runner=lambda config: SlurmRunner(["/nonexistent/slurm"], 5),
                sleep=sleeps.append)
    res = CliRunner().invoke(main, [*args, "--config", str(cfg)], obj=deps)
    assert res.exit_code == 1
    (line,) = errors_of(res)
    assert "cannot run /nonexistent/slurm" in line
    assert "install them, or set slurmCommandPrefix" in line


@pytest.mark.parametrize("args", [*ONE_SHOTS, ("daemon",), ("queue", "retry", "1")],
                         ids=lambda a: " ".join(a[:2]))
def test_a_state_directory_that_cannot_be_used(env, args, monkeypatch):
    seed(env)
    real_open = os.open

    def denied(path, *a, **kw):
        if str(path).endswith("outbox.lock"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr("ccadapter.runtime.statelock.os.open", denied)
    res = run(env, *args)
    if args[-1] == "--dry-run":  # reads a copy: needs no lock
        assert res.exit_code == 0, res.output
        return
    assert res.exit_code == 1
    (line,) = errors_of(res)
    assert line == (f"error: config key 'stateDirectory': cannot create the outbox lock "
                    f"{env[0].parent}/state/outbox.lock: Permission denied; run as the "
                    "daemon's user (or root), or give that user access")


def test_a_full_disk_while_syncing(env, monkeypatch):
    def full(self, events):
        raise OutboxError(str(self.path), "database or disk is full")

    monkeypatch.setattr(Outbox, "enqueue", full)
    res = run(env, "sync", "--once", "--only", "slurm-window")
    assert res.exit_code == 1
    (line,) = errors_of(res)
    assert line.startswith("error: slurm-window: outbox ")
    assert line.endswith("database or disk is full; free space on the file system of "
                         "stateDirectory")


def test_nats_unreachable(env, standin):
    port = free_port()
    with_config(env, natsServer="127.0.0.1", natsPort=port, natsPublishTimeout=0.5,
                natsPassword="nats-secret-77")
    res = run(env, "sync", "--once", "--only", "slurm-window")
    assert res.exit_code == 1 and "nats-secret-77" not in res.output
    (line,) = errors_of(res)
    assert line.startswith("error: ") and " NATS notification(s) not published: NATS " \
        f"nats://127.0.0.1:{port} (natsServer): " in line
    assert len(standin.started(CLUSTER)) > 5  # REST went on


def test_a_damaged_outbox(env):
    state = env[0].parent / "state"
    state.mkdir()
    (state / "outbox.sqlite").write_bytes(b"garbage" * 1000)
    for args in (["queue", "list"], ["queue", "retry", "1"], ["sync", "--once"],
                 ["backfill", "--since", "1h"]):
        res = run(env, *args)
        assert res.exit_code == 1, args
        (line,) = errors_of(res)
        assert f"the outbox {state}/outbox.sqlite: file is not a database; " in line, args


def fake_slurm(tmp: Path) -> Path:
    """A Slurm for subprocesses, from a script: the recorded 24.11 sacct window and a cluster
    name; any other command answers nothing."""
    script = tmp / "slurm"
    script.write_text(f"""#!{sys.executable}
import sys
from pathlib import Path
base = Path({str(FIXTURES / "24.11" / "testbed")!r})
argv = sys.argv[1:]
if argv[0] == "sacct":
    sys.stdout.write((base / "sacct-window.json").read_text())
elif argv[:3] == ["scontrol", "show", "config"]:
    print("ClusterName = {CLUSTER}")
""")
    script.chmod(0o755)
    return script


def test_no_traceback_in_a_real_process(env, tmp_path):
    """The same failures as a separate process sees them (stderr, exit code)."""
    with_config(env, ccRestUrl=f"http://127.0.0.1:{free_port()}",
                slurmCommandPrefix=[str(fake_slurm(tmp_path))])
    cfg = env[0]
    cases = [(["sync", "--once"], 1), (["recover", "--stale-wait", "0"], 1),
             (["backfill", "--since", "1h"], 1), (["status"], 0), (["jobs"], 0),
             (["queue", "list"], 0), (["check-config", str(tmp_path / "missing.json")], 2),
             (["hook"], 0)]
    for args, code in cases:
        extra = [] if args[0] in ("check-config", "hook") else ["--config", str(cfg)]
        res = subprocess.run([sys.executable, "-m", "ccadapter", *args, *extra],
                             capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL, check=False,
                             env={**os.environ, "SLURM_JOB_ID": "1",
                                  "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"})
        assert res.returncode == code, (args, res.stderr)
        assert "Traceback" not in res.stderr and TOKEN not in res.stderr + res.stdout, args
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
        assert bool(errors) == (code != 0), (args, res.stderr)
    log = tmp_path / "daemon.log"
    with log.open("w") as fh:
        daemon = subprocess.Popen([sys.executable, "-m", "ccadapter", "daemon", "--config",
                                   str(cfg)], stdout=fh, stderr=fh, stdin=subprocess.DEVNULL)
    until = time.time() + 60  # its first cycles, with cc-backend refusing
    while "cc-cache failed" not in log.read_text() and time.time() < until:
        time.sleep(0.2)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(60) == 0
    text = log.read_text()
    assert "Traceback" not in text and TOKEN not in text
    assert "cc-cache failed: CcBackendError: cc-backend http://127.0.0.1:" in text


# --- energy ----------------------------------------------------------------------------------

def with_energy_slurm(env) -> dict[int, int]:
    """The recorded cluster, its complete and fail jobs given consumed energy
    (tests/energy.py: constructed from the real records, the test bed gathers none)."""
    ids = fixture_json("24.11", "testbed/workload.json")["ids"]
    joules = {ids["complete"][0]: 51234, ids["fail"][0]: 4321}
    env[2].runner = RecordedSlurm(
        "24.11", with_energy(fixture_json("24.11", "testbed/sacct-window.json"), joules),
        fixture_text("24.11", "testbed/scontrol-d-final.txt"))
    return joules


def test_sync_puts_the_energy_slurm_accounted_into_metadata(env, standin):
    joules = with_energy_slurm(env)
    res = run(env, "sync", "--once")
    assert res.exit_code == 0, res.output
    edits = standin.requests("/api/jobs/edit_meta/")
    assert sorted((r.body["jobId"], r.body["payload"]["value"], r.status) for r in edits) == \
        sorted((j, str(e), 200) for j, e in joules.items())
    stored = {j["jobId"]: j["metaData"].get("energy") for j in standin.jobs(CLUSTER)}
    assert {j: e for j, e in stored.items() if e} == {j: str(e) for j, e in joules.items()}
    log = [(r.path, r.body["jobId"]) for r in standin.requests() if r.body
           and r.body.get("jobId") in joules]
    for job in joules:  # start, stop, then the energy
        assert [p for p, j in log if j == job] == ["/api/jobs/start_job/",
                                                   "/api/jobs/stop_job/",
                                                   "/api/jobs/edit_meta/"]
    assert run(env, "sync", "--once").exit_code == 0  # nothing owed twice
    assert len(standin.requests("/api/jobs/edit_meta/")) == len(joules)


def test_jobs_shows_the_energy_edit(env):
    joules = with_energy_slurm(env)
    res = run(env, "jobs", "--since", f"@{SINCE - 60:.0f}", "--format", "json")
    assert res.exit_code == 0, res.output
    views = {v["jobId"]: v for v in json.loads(res.output)}
    for job, value in joules.items():
        assert views[job]["editMeta"] == {
            "jobId": job, "cluster": CLUSTER, "startTime": views[job]["stopJob"]["startTime"],
            "payload": {"key": "energy", "value": str(value)}}
    assert sum("editMeta" in v for v in views.values()) == len(joules)
    table = run(env, "jobs", "--since", f"@{SINCE - 60:.0f}", "--format", "table").output
    assert table.count("start+stop+energy") == len(joules)


def release_of(doc: dict, version: str) -> dict:
    """A recorded sacct document as a later Slurm release would write it: the same records
    under another version (a faked release: ccadapter has not verified it)."""
    major, minor, micro = version.split(".")
    out = json.loads(json.dumps(doc))
    out["meta"]["slurm"]["version"] = {"major": major, "minor": minor, "micro": micro}
    out["meta"]["slurm"]["release"] = version
    return out


def test_jobs_prints_nothing_on_an_error_and_names_the_real_cluster(env):
    """An unreadable record, or a release older than verified: stderr names the cluster
    (the local one's own name, not None) and the version; stdout stays empty, since a
    partial list would read as complete."""
    doc = fixture_json("24.11", "testbed/sacct-window.json")
    doc["jobs"][0]["state"]["current"] = 7
    env[2].runner = RecordedSlurm("24.11", doc, listing=fixture_json(
        "24.11", "testbed/sacct-window.json"))
    res = run(env, "jobs", "--since", f"@{SINCE}")
    assert res.exit_code == 1 and res.stdout == ""
    assert "error: cluster cluster24: 1 record(s) could not be read" in res.stderr
    old = release_of(fixture_json("24.11", "testbed/sacct-window.json"), "21.08.8")
    env[2].runner = RecordedSlurm("21.08.8", old)
    res = run(env, "jobs", "--since", f"@{SINCE}")
    assert res.exit_code == 1 and res.stdout == ""
    (line,) = errors_of(res)
    assert line.startswith("error: cluster cluster24: Slurm 21.08.8, `sacct --json`: "
                           "unsupported Slurm generation")


def test_a_release_newer_than_verified_is_read_and_a_record_that_does_not_fit_waits(env,
                                                                                   caplog):
    """Issue 28, item 5, with a faked 26.11: read as 26.05, every record checked. A record
    whose layout changed is reported (version, command, field) and asked again at every
    cycle; the others go out. Once a ccadapter reads it, it goes out too: nothing lost."""
    recorded = fixture_json("26.05", "testbed/sacct-window.json")
    ids = fixture_json("26.05", "testbed/workload.json")["ids"]
    newer = release_of(recorded, "26.11.0")
    (changed,) = [r for r in newer["jobs"] if r["job_id"] == ids["complete"][0]]
    changed["exclusive"] = {"value": "NO"}  # a layout 26.05 does not write
    since = fixture_json("26.05", "testbed/workload.json")["since"]
    final = fixture_text("26.05", "testbed/scontrol-d-final.txt")
    with CcBackendStandin(TOKEN, clusters=["cluster26"]) as standin:
        with_config(env, ccRestUrl=standin.url)
        env[2].runner = RecordedSlurm("26.11.0", newer, final, listing=recorded)
        LastRun(env[0].parent / "lastrun").set(since - 60)
        res = run(env, "sync", "--once")
        assert res.exit_code == 0, res.output
        assert "Slurm 26.11.0 is newer than the newest release this ccadapter verified " \
               "(26.05)" in caplog.text
        assert f"Slurm 26.11.0, `sacct --json`: job {changed['job_id']}: exclusive: " \
               "expected a string" in caplog.text
        started = {b["jobId"] for b in standin.started("cluster26")}
        assert changed["job_id"] not in started and len(started) > 5
        status = json.loads(run(env, "status", "--format", "json").stdout)
        assert status["unparsedRecords"]["count"] == 1
        env[2].runner = RecordedSlurm("26.11.0", release_of(recorded, "26.11.0"), final,
                                      listing=recorded)  # read as Slurm wrote it at last
        res = run(env, "sync", "--once")
        assert res.exit_code == 0, res.output
        assert changed["job_id"] in {b["jobId"] for b in standin.stopped()}
        status = json.loads(run(env, "status", "--format", "json").stdout)
        assert status["unparsedRecords"]["count"] == 0
