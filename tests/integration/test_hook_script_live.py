"""The shipped hook, hooks/ccadapter-hook.sh, run by a real slurmctld for every job (issue
47): with ``prepSockConnectPath`` a TCP socket, bash alone tells the daemon (its venv here
has no Python at all, so nothing else could have), and every job arrives through it within
seconds while the daemon's next poll is 10 minutes away.

The test bed's wrapper runs it as its ``hook_also``, beside the test bed's own hook, whose
port nobody listens on during the test: what the daemon hears came from the script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ccbackend import CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.sync_scenario import submit_batch, wait_for
from tests.integration.test_hook_live import assert_started_at_once, start_daemon
from tests.integration.workload import Cluster
from tests.unit.prep.test_hook_and_server import free_port, site_hook

pytestmark = pytest.mark.integration


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
    script.write_text(site_hook(f"{where}/no-venv", f"{where}/config.json"))
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
            daemon = start_daemon(cluster, cc, tmp_path, poll=600,
                                  listen=f"tcp:127.0.0.1:{port}")
            try:
                ids = submit_batch(cluster, "bashhook", 6)
                wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 40,
                         "not delivered within 40 s although the poll interval is 600 s")
            finally:
                assert daemon.terminate() == 0
            assert_started_at_once(cc, cluster, ids)
    finally:
        Path(cluster.hook_also).unlink(missing_ok=True)
    assert (stderr.read_text() if stderr.exists() else "") == ""
