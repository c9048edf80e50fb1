"""status: the document read from files, the daemon's cycle record, secret scrubbing."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccadapter.cli.tables import render_events, render_table
from ccadapter.config.keys import Config
from ccadapter.config.secrets import scrub
from ccadapter.daemon.loop import Routine
from ccadapter.ops.status import CycleLog, collect
from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, Result
from ccadapter.runtime.lastrun import LastRun
from ccadapter.runtime.pidlock import PidLock, pid_alive

JWT = "jwt-secret-abcdef"


@pytest.fixture
def config(tmp_path):
    return Config(pidFilePath=str(tmp_path / "run" / "daemon.pid"),
                  lastRunPath=str(tmp_path / "lastrun"), stateDirectory=str(tmp_path / "state"),
                  ccRestJwt=JWT)


@pytest.fixture
def outbox_file(tmp_path):
    return tmp_path / "state" / "outbox.sqlite"


def holder(pid_path):
    """A process holding the daemon's lock until its stdin closes."""
    code = ("import sys\nfrom ccadapter.runtime.pidlock import PidLock\n"
            f"lock = PidLock({str(pid_path)!r})\nlock.acquire()\n"  # kept: GC would release
            "print('held', flush=True)\nsys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_nothing_there_yet_creates_nothing(config, outbox_file):
    doc = collect(config, outbox_file)
    assert doc["daemon"] == {"pidFile": config.pid_file_path, "pid": None, "alive": False,
                             "lockHeld": False, "lockPids": []}
    assert doc["outbox"]["exists"] is False and doc["reconcilers"] == {}
    assert doc["lastRun"]["time"] is None
    assert not outbox_file.exists() and not outbox_file.parent.exists()


def test_with_a_daemon_holding_the_lock_then_gone(config, outbox_file):
    proc = holder(config.pid_file_path)
    try:
        doc = collect(config, outbox_file)
        assert doc["daemon"]["pid"] == proc.pid
        assert doc["daemon"]["alive"] is True
        assert doc["daemon"]["lockHeld"] is True and doc["daemon"]["lockPids"] == [proc.pid]
        assert f"PID {proc.pid} alive; lock held by PID {proc.pid}" in render_table(doc)
        assert PidLock(config.pid_file_path).lock_owners() == [proc.pid]  # not status
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
    # a crash leaves the PID file; the lock goes with the process
    (tmp_pid := PidLock(config.pid_file_path).pid_path).write_text(f"{proc.pid}\n")
    doc = collect(config, outbox_file)
    assert tmp_pid.exists()
    assert doc["daemon"]["pid"] == proc.pid and doc["daemon"]["alive"] is False
    assert doc["daemon"]["lockHeld"] is False and doc["daemon"]["lockPids"] == []
    assert "stale PID file" in render_table(doc)


def test_outbox_cycles_and_last_run(config, outbox_file):
    now = 2_000_000.0
    box = Outbox(outbox_file, clock=lambda: now - 30)
    box.enqueue([NewEvent("c", 1, 100, "start", {"jobId": 1}),
                 NewEvent("c", 2, 100, "start", {"jobId": 2})])
    first = box.queue.due()[0]
    box.queue.record([Result(first.id, DeliveryStatus.REJECTED,
                             f"HTTP 400: token {JWT} not allowed")])
    routine = Routine("slurm-window", lambda: None, 60, last_ok=now - 5)
    CycleLog(box, clock=lambda: now - 5)(routine)
    routine.last_error = "SlurmCommandError: sacct: exit code 1"
    routine.name = "cc-cache"
    CycleLog(box, clock=lambda: now - 2)(routine)
    box.close()
    LastRun(config.last_run_path).set(now - 10)
    doc = collect(config, outbox_file, clock=lambda: now)
    assert doc["outbox"]["pending"] == 1 and doc["outbox"]["rejected"] == 1
    assert doc["outbox"]["oldestPendingAge"] == 30.0
    assert doc["outbox"]["counts"] == {"start": {"pending": 1, "rejected": 1}}
    (ev,) = doc["outbox"]["rejectedEvents"]
    assert ev["jobId"] == 1 and ev["error"] == "HTTP 400: token <redacted> not allowed"
    assert doc["reconcilers"]["slurm-window"] == {"at": now - 5, "ok": True,
                                                  "lastOk": now - 5, "error": None, "age": 5.0}
    assert doc["reconcilers"]["cc-cache"]["ok"] is False
    assert doc["reconcilers"]["cc-cache"]["error"].startswith("SlurmCommandError")
    assert doc["lastRun"]["age"] == 10.0
    assert JWT not in json.dumps(doc) and JWT not in render_table(doc)
    table = render_table(doc)
    assert "1 pending (oldest 30s ago), 1 rejected" in table
    assert "cc-cache" in table and "error: SlurmCommandError" in table


def test_a_cycle_written_while_status_reads_is_not_older_than_now(config, outbox_file):
    """The daemon writes on while ``status`` reads: a cycle stamped after the document's
    time is 0 s old (CI saw -0.01 s before)."""
    now = 2_000_000.0
    box = Outbox(outbox_file, clock=lambda: now)
    CycleLog(box, clock=lambda: now + 0.01)(Routine("slurm-window", lambda: None, 60))
    box.close()
    LastRun(config.last_run_path).set(now + 0.5)
    doc = collect(config, outbox_file, clock=lambda: now)
    assert doc["reconcilers"]["slurm-window"]["age"] == 0.0
    assert doc["lastRun"]["age"] == 0.0


def test_cycle_log_chains_and_survives_a_failing_write(tmp_path, caplog):
    box = Outbox(tmp_path / "o.sqlite")
    seen = []
    log = CycleLog(box, then=seen.append)
    routine = Routine("nodestate", lambda: None, 60)
    box.close()  # every write now fails
    log(routine)
    assert seen == [routine]
    assert "cannot record the cycle of nodestate" in caplog.text


def test_scrub_reaches_nested_strings_only():
    doc = {"a": ["x s3cret y", {"b": "s3cret"}], "n": 3, "none": None}
    assert scrub(doc, ["s3cret", ""]) == {"a": ["x <redacted> y", {"b": "<redacted>"}],
                                          "n": 3, "none": None}
    assert scrub(doc, []) is doc


def test_pid_alive():
    assert pid_alive(os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not pid_alive(proc.pid)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 10
    while time.time() < deadline and pid_alive(zombie.pid):
        time.sleep(0.05)
    assert not pid_alive(zombie.pid)  # exited, not yet reaped
    zombie.wait()


def test_render_events_shows_when_pending_ones_are_next_tried():
    rows = [{"id": 1, "kind": "start", "status": "pending", "cluster": "c", "jobId": 5,
             "startTime": 100, "attempts": 2, "nextAttemptAt": 1030.0, "error": "HTTP 503"},
            {"id": 2, "kind": "stop", "status": "rejected", "cluster": "c", "jobId": 5,
             "startTime": 100, "attempts": 1, "nextAttemptAt": 0, "error": "HTTP 400"}]
    lines = render_events(rows, now=1000.0).splitlines()
    assert lines[0].split() == ["ID", "KIND", "STATUS", "CLUSTER", "JOBID", "START", "TRIES",
                                "NEXT", "ERROR"]
    assert lines[1].split()[-4:] == ["in", "30s", "HTTP", "503"]
    assert lines[2].split()[-3:] == ["-", "HTTP", "400"]


def test_unreadable_outbox_is_an_error(config, outbox_file):
    outbox_file.parent.mkdir(parents=True)
    outbox_file.write_bytes(b"not a database at all" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        collect(config, outbox_file)


def test_failover_role_is_shown_and_absent_without_failover(config, outbox_file):
    from ccadapter.daemon.control import Control
    from ccadapter.slurm.formats.ping import ControllerPing

    now = 3_000_000.0
    box = Outbox(outbox_file)
    doc = collect(config, outbox_file, clock=lambda: now)
    assert doc["control"] is None and "\nrole " not in render_table(doc)

    class Pings:
        def controllers(self):
            return [ControllerPing("primary", "ctld1", True), ControllerPing("backup", "ctld2",
                                                                             True)]

    Control(Pings(), "ctld2", record=box.store.set_state, clock=lambda: now - 40).run_once()
    box.close()
    doc = collect(config, outbox_file, clock=lambda: now)
    assert doc["control"] == {"role": "standby", "since": now - 40, "host": "ctld2",
                              "inControl": "ctld1", "checkedAt": now - 40, "error": None,
                              "age": 40.0}
    assert ("role        standby since 40s ago  (this host ctld2; in control: ctld1; "
            "checked 40s ago)") in render_table(doc)


def test_the_hook_counts_the_daemon_recorded_are_shown(config, outbox_file):
    """What the hook socket took and dropped, as the daemon's hook-counts routine records
    it (App.record_hook), for an operator who suspects a flood."""
    from ccadapter.daemon.app import HOOK_KEY
    from ccadapter.prep.messages import DropReason
    from ccadapter.prep.tally import HookTally

    now = 3_000_000.0
    tally = HookTally(wall=lambda: now - 15, started=now - 600)
    tally.received("c1")
    for _ in range(3):
        tally.dropped(DropReason.INVALID, "not JSON")
    tally.dropped(DropReason.FLOOD, "job 4000000000 start")
    tally.unknown("c1", [7, 8])
    box = Outbox(outbox_file)
    assert collect(config, outbox_file, clock=lambda: now)["hook"] is None
    box.store.set_state(HOOK_KEY, json.dumps(tally.snapshot()))
    box.close()
    doc = collect(config, outbox_file, clock=lambda: now)
    assert doc["hook"] == {"since": now - 600, "at": now - 15, "received": 1,
                           "dropped": {"flood": 1, "invalid": 3}, "unknownJobs": {"c1": 2},
                           "age": 15.0}
    assert ("hook        1 received, dropped: flood 1, invalid 3; jobs slurmctld did not show: "
            "2  (since the daemon started; recorded 15s ago)") in render_table(doc)


@pytest.fixture
def read_only(tmp_path):
    """A directory that nothing may write, root included: bound read-only onto itself
    (what a user who may only read the state directory meets, with root's test run)."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
        made.append(path)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        return path

    yield make
    for path in made:
        subprocess.run(["umount", str(path)], check=True)


def test_status_and_queue_list_only_read_the_outbox(config, outbox_file, read_only):
    """Issue 29: ``status`` and ``queue list`` open the outbox read-only: no schema statement,
    no upgrade, no file created; so they work where the state directory may only be read,
    and an outbox of an older ccadapter stays as it was (no runs table added)."""
    from click.testing import CliRunner

    from ccadapter.cli import main

    box = Outbox(outbox_file)
    box.enqueue([NewEvent("c1", 7, 100, "start", {"jobId": 7})])
    box.close()
    db = sqlite3.connect(outbox_file)  # as an outbox of before the runs table
    with db:
        db.execute("DROP TABLE runs")
        db.execute("DELETE FROM state WHERE key = 'schema.runs'")
    db.close()
    before = sorted(p.name for p in outbox_file.parent.iterdir())
    cfg = outbox_file.parent.parent / "config.json"
    cfg.write_text(json.dumps({"lastRunPath": config.last_run_path,
                               "stateDirectory": config.state_directory,
                               "pidFilePath": config.pid_file_path}))
    read_only(outbox_file.parent)
    status = CliRunner().invoke(main, ["status", "--format", "json", "--config", str(cfg)])
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["outbox"]["pending"] == 1
    listed = CliRunner().invoke(main, ["queue", "list", "--format", "json", "--config",
                                       str(cfg)])
    assert listed.exit_code == 0, listed.output
    assert [e["jobId"] for e in json.loads(listed.stdout)] == [7]
    assert sorted(p.name for p in outbox_file.parent.iterdir()) == before
    db = sqlite3.connect(f"{outbox_file.as_uri()}?immutable=1", uri=True)
    try:
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'runs'"
                          ).fetchone() == (0,)
    finally:
        db.close()


def test_what_the_daemon_sent_in_slurms_numbering_is_shown(config, outbox_file):
    """Issue 45: the subclusters whose resources went as Slurm numbers them, as the daemon's
    Renumbering recorded them."""
    from ccadapter.numbering.renumber import STATE_KEY, Renumbering
    from ccadapter.numbering.translate import SlurmLayout

    box = Outbox(outbox_file)
    r = Renumbering(lambda: {}, lambda cluster: {"n1": SlurmLayout(2, 4, 2, 16)},
                    record=lambda text: box.store.set_state(STATE_KEY, text))
    r.start_body({"jobId": 9, "cluster": "c", "resources": [{"hostname": "n1",
                                                             "hwthreads": [0]}]})
    box.close()
    doc = collect(config, outbox_file)
    assert doc["resourceNumbering"] == [{
        "cluster": "c", "subcluster": "(none)", "reason": "no-topology",
        "detail": "cc-backend holds no cluster configuration of c", "host": "n1", "job": 9,
        "starts": 1}]
    assert ("numbering   c/(none): sent in Slurm's numbering (no-topology: cc-backend holds "
            "no cluster configuration of c; node n1, job 9 first, 1 start(s))"
            ) in render_table(doc)
