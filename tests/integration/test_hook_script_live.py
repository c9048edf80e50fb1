"""The shipped hook, hooks/ccadapter-hook.sh, run by a real slurmctld for every job (issue
47): with ``prepSockConnectPath`` a TCP socket, bash alone tells the daemon (its venv here
has no Python at all, so nothing else could have), and every job arrives through it within
seconds while the daemon's next poll is 10 minutes away.

The test bed's wrapper runs it as its ``hook_also``, beside the test bed's own hook, whose
port nobody listens on during the test: what the daemon hears came from the script."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.sync_scenario import (
    DaemonProc,
    exactly_once,
    submit_batch,
    wait_for,
    write_config,
)
from tests.integration.workload import Cluster, sacct_truth
from tests.unit.prep.test_hook_and_server import free_port

pytestmark = pytest.mark.integration

SHIPPED = Path(__file__).resolve().parents[2] / "hooks" / "ccadapter-hook.sh"


def install(cluster: Cluster, port: int, where: Path) -> Path:
    """The script as a site installs it, inside the cluster's root, as the wrapper's second
    program; its stderr (what slurmctld would log) kept in ``where``/stderr. Returns the host
    path of that file."""
    root = cluster.prefix[1] if cluster.prefix[:1] == ("chroot",) else ""
    inside = where.relative_to("/")
    host_dir = Path(root or "/") / inside
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "config.json").write_text(json.dumps(
        {"prepSockConnectPath": f"tcp:127.0.0.1:{port}"}, indent=2))
    script = host_dir / "ccadapter-hook.sh"
    script.write_text(SHIPPED.read_text()
                      .replace("VENV=/opt/ccadapter", f"VENV={where}/no-venv")
                      .replace("CONFIG=/etc/cc-slurm-adapter/config.json",
                               f"CONFIG={where}/config.json"))
    script.chmod(0o755)
    also = Path(cluster.hook_also)
    tmp = also.with_suffix(".new")
    tmp.write_text(f"#!/bin/sh\nexec {where}/ccadapter-hook.sh 2>>{where}/stderr\n")
    tmp.chmod(0o755)
    tmp.replace(also)
    return host_dir / "stderr"


@pytest.mark.parametrize("cluster", HEAVY_VERSIONS, indirect=True)
def test_bash_alone_tells_the_daemon_of_every_job(cluster, tmp_path):
    if not cluster.hook_also:
        pytest.fail(f"{cluster.name}: the test bed names no hook_also")
    port = free_port()
    stderr = install(cluster, port, Path(f"/tmp/ccadapter-bash-hook-{port}"))
    try:
        with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
            cfg = write_config(cluster, cc, tmp_path, slurmPollInterval=600,
                               ccPollInterval=3600,
                               prepSockListenPath=f"tcp:127.0.0.1:{port}")
            LastRun(tmp_path / "lastrun").set(time.time() - 5)
            daemon = DaemonProc(cfg, tmp_path / "daemon.log")
            daemon.start()
            daemon.wait_listening()
            time.sleep(1)  # the first poll cycle passed: the next is 10 minutes away
            try:
                ids = submit_batch(cluster, "bashhook", 6)
                wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 40,
                         "not delivered within 40 s although the poll interval is 600 s")
            finally:
                assert daemon.terminate() == 0
            assert exactly_once(cc, cluster, ids) == []
            truth = sacct_truth(cluster, ids)
            starts = {r.body["jobId"]: r.time for r in cc.requests("/api/jobs/start_job/")
                      if r.status == 201}
            for job_id in ids:  # Slurm's StartTime has whole seconds: allow one more
                assert starts[job_id] - truth[job_id]["start"] < 3.0, job_id
    finally:
        Path(cluster.hook_also).unlink(missing_ok=True)
    assert (stderr.read_text() if stderr.exists() else "") == ""
