"""The outbox's lock: where it lives (the state directory, by default lastRunPath's), who
may hold it, and what a refused process learns about the holder."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ccadapter.config.keys import Config
from ccadapter.config.views import outbox_path
from ccadapter.errors import FileAccessError
from ccadapter.runtime.statelock import LOCK_FILE, Holder, OutboxBusy, StateLock


def test_state_directory_defaults_to_the_directory_of_last_run(tmp_path):
    a = Config(lastRunPath=str(tmp_path / "a" / "lastrun"), pidFilePath=str(tmp_path / "a.pid"))
    b = Config(lastRunPath=str(tmp_path / "b" / "lastrun"), pidFilePath=str(tmp_path / "b.pid"))
    assert outbox_path(a) == tmp_path / "a" / "outbox.sqlite"
    assert outbox_path(b) == tmp_path / "b" / "outbox.sqlite"  # two clusters, two outboxes
    # cc-slurm-adapter's default lastRunPath keeps the old default directory
    assert outbox_path(Config()) == Path("/var/lib/cc-slurm-adapter/outbox.sqlite")
    explicit = Config(lastRunPath=str(tmp_path / "a" / "lastrun"),
                      stateDirectory=str(tmp_path / "s"))
    assert outbox_path(explicit) == tmp_path / "s" / "outbox.sqlite"


def holder_process(state_dir: Path, command: str, config: str) -> subprocess.Popen:
    """Another process holding the lock until its stdin closes."""
    code = ("import sys\nfrom ccadapter.runtime.statelock import StateLock\n"
            f"lock = StateLock({str(state_dir)!r})\nlock.acquire({command!r}, {config!r})\n"
            "print('held', flush=True)\nsys.stdin.read()\nlock.release()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    state = tmp_path / "state"
    proc = holder_process(state, "daemon", "/etc/cc/cluster22.json")
    try:
        with pytest.raises(OutboxBusy) as refused:
            StateLock(state).acquire("sync --once", "/etc/cc/other.json")
        assert refused.value.holder == Holder(proc.pid, "daemon", "/etc/cc/cluster22.json")
        assert str(refused.value) == (
            f"the outbox in {state} is in use by PID {proc.pid} (ccadapter daemon, config "
            "/etc/cc/cluster22.json)")
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
    assert (state / LOCK_FILE).read_text() == ""  # a clean release leaves no stale text
    lock = StateLock(state)
    lock.acquire("sync --once", "")
    text = json.loads((state / LOCK_FILE).read_text())
    assert (text["pid"], text["command"], text["config"]) == (os.getpid(), "sync --once", "")
    lock.release()


def test_the_kernel_releases_the_lock_of_a_killed_holder(tmp_path):
    state = tmp_path / "state"
    proc = holder_process(state, "backfill", "/c.json")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    proc.stdin.close()
    assert json.loads((state / LOCK_FILE).read_text())["pid"] == proc.pid  # text left behind
    lock = StateLock(state)
    lock.acquire("daemon", "/c.json")  # no obstacle
    lock.release()


def test_text_of_a_dead_process_is_not_believed(tmp_path):
    state = tmp_path / "state"
    proc = holder_process(state, "daemon", "/new.json")
    try:
        # a crashed holder's text, and the new holder not having written its own yet
        (state / LOCK_FILE).write_text(json.dumps(
            {"pid": 999_999_999, "command": "daemon", "config": "/old.json", "since": 0}))
        with pytest.raises(OutboxBusy) as refused:
            StateLock(state).acquire("recover", "/new.json")
        assert refused.value.holder == Holder(proc.pid)
        assert f"in use by PID {proc.pid}" in str(refused.value)
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()


def test_an_unusable_state_directory_names_the_key(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(FileAccessError) as err:
        StateLock(tmp_path / "file" / "state").acquire("daemon", "")
    msg = str(err.value)
    assert msg.startswith("config key 'stateDirectory': cannot create the outbox lock "
                          f"{tmp_path}/file/state/{LOCK_FILE}: ")
    assert "correct the path" in msg and "\n" not in msg
