"""The systemd unit and the notify protocol (issue 6, part 1), with the daemon on cluster22."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.integration.sync_scenario import write_config

pytestmark = pytest.mark.integration
UNIT = Path(__file__).resolve().parents[2] / "systemd" / "ccadapter.service"


def test_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing (tests/run installs Debian's systemd package)"
    exe = Path(sys.executable).with_name("ccadapter")
    unit = tmp_path / "ccadapter.service"  # the installed binary's path, for the check
    unit.write_text(UNIT.read_text().replace("/opt/ccadapter/bin/ccadapter", str(exe)))
    res = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0 and res.stdout + res.stderr == "", res.stdout + res.stderr


def test_ready_then_watchdog(testbed, tmp_path):
    cluster = testbed["22.05"]
    notify_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.settimeout(30)
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        cfg = write_config(cluster, cc, tmp_path, slurmPollInterval=60,
                           prepSockListenPath=f"unix:{tmp_path}/hook.sock")
        LastRun(tmp_path / "lastrun").set(time.time() - 5)
        env = {**os.environ, "NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "1000000"}
        proc = subprocess.Popen([sys.executable, "-m", "ccadapter", "daemon", "--config",
                                 str(cfg)], env=env, stdin=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            got = []
            until = time.time() + 30
            while time.time() < until and not (got and "WATCHDOG=1" in got[-1]
                                               and any("READY=1" in g for g in got)):
                got.append(listener.recv(4096).decode())
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
            listener.close()
        ready = next(i for i, g in enumerate(got) if "READY=1" in g)
        assert any("WATCHDOG=1" in g for g in got[ready:]), got
        assert proc.returncode == 0, err[-2000:]
