"""The demo's housekeeping (tests/testbed/demo_site.py) without Slurm: ``down`` stops only the
demo's own processes and cancels only the jobs it submitted. The demo itself, end to end, is
tests/integration/test_demo_web.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.testbed import demo_site


def sleeper(cwd: Path, *args: str) -> subprocess.Popen:
    """A process in ``cwd`` with ``args`` on its command line, once it shows them (between
    fork and exec /proc still shows the parent's)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args],
                            cwd=cwd, stdin=subprocess.DEVNULL)
    until = time.monotonic() + 10
    while b"time.sleep" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < until, "the sleeper did not start"
        time.sleep(0.01)
    return proc


def test_alive_knows_the_demos_process_by_its_config_or_directory(tmp_path: Path) -> None:
    site, config, other = tmp_path / "site", tmp_path / "config.json", tmp_path / "other"
    site.mkdir()
    other.mkdir()
    by_dir, by_arg = sleeper(site), sleeper(other, str(config))
    try:
        pid_file = tmp_path / "pid"
        pid_file.write_text(f"{by_dir.pid}\n")
        assert demo_site.alive(pid_file, site) == by_dir.pid
        assert demo_site.alive(pid_file, other) == 0  # another server's directory
        pid_file.write_text(f"{by_arg.pid}\n")
        assert demo_site.alive(pid_file, config) == by_arg.pid
        assert demo_site.alive(pid_file, tmp_path / "another.json") == 0
        pid_file.write_text("not a pid\n")
        assert demo_site.alive(pid_file, site) == 0
    finally:
        for proc in (by_dir, by_arg):
            proc.kill()
            proc.wait()
    pid_file.write_text(f"{by_dir.pid}\n")  # gone: a reused pid is not the demo's
    assert demo_site.alive(pid_file, site) == 0


def test_stop_ends_the_process_and_forgets_its_pid(tmp_path: Path) -> None:
    proc = sleeper(tmp_path)
    pid_file = tmp_path / "pid"
    pid_file.write_text(f"{proc.pid}\n")
    demo_site.stop(pid_file, tmp_path, "a sleeper")
    assert proc.wait(10) != 0  # SIGTERM
    assert not pid_file.exists()


def test_down_cancels_the_submitted_ids_once(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir, asked = tmp_path / "bin", tmp_path / "asked"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')
    (bin_dir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(demo_site, "SUBMITTED", tmp_path / "submitted")
    monkeypatch.setattr(demo_site, "DAEMON", (tmp_path / "d.pid", tmp_path / "c.json"))
    monkeypatch.setattr(demo_site, "SERVER", (tmp_path / "s.pid", tmp_path / "site"))
    demo_site.down()  # nothing submitted: Slurm is not asked
    assert not asked.exists()
    (tmp_path / "submitted").write_text("101\n102\n")
    demo_site.down()
    demo_site.down()
    assert asked.read_text() == "101 102\n"


def test_down_keeps_the_ids_where_there_is_no_scancel(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr(demo_site, "SUBMITTED", tmp_path / "submitted")
    monkeypatch.setattr(demo_site, "DAEMON", (tmp_path / "d.pid", tmp_path / "c.json"))
    monkeypatch.setattr(demo_site, "SERVER", (tmp_path / "s.pid", tmp_path / "site"))
    (tmp_path / "submitted").write_text("5\n")
    demo_site.down()
    assert (tmp_path / "submitted").read_text() == "5\n"
