"""Issue 32 on real Slurm 22.05: the hook's TCP socket under abuse while real jobs run.

For 15 s, 8 connections at a time send what anyone reaching the port could: job ids
slurmctld does not know (far from its own, and a few again and again), garbage, 200 kB
messages and messages never finished. They come from another user (``nobody``,
tests/integration/hostile.py ``flood``): root's would be slurmctld's own messages (issue 36),
which the rules for strangers do not bound. Meanwhile real jobs run and their hooks announce them
on the same socket. Slurm's side is read by the test: slurmctld's own count of single-job
questions (``sdiag``, REQUEST_JOB_INFO_SINGLE) and sacct's view of the real jobs.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.ccbackend import CcBackend
from tests.integration.conftest import hook_configured
from tests.integration.sync_scenario import exactly_once, submit_batch, wait_for
from tests.integration.test_hook_live import start_daemon
from tests.integration.test_metrics_live import free_port, get, parse, scrape
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration

SECONDS = 15
CONNECTIONS = 8
HOSTILE = Path(__file__).with_name("hostile.py")
# what a flood may cost at most (ccadapter.prep.guard: a budget of 60 unknown ids, 2 a
# second after that; ccadapter.prep.shares bounds it further: 40 questions at once, 2 a second)
MAX_UNKNOWN_ASKED = 60 + 2 * 60 + 100


def sdiag_rpcs(cluster: Cluster, *names: str) -> int:
    """slurmctld's own count of these RPCs (sdiag's RPC statistics), summed."""
    out = cluster.run("sdiag")
    return sum(int(m[1]) for name in names
               for m in [re.search(rf"{name}\s+\(\s*\d+\)\s+count:(\d+)", out)] if m)


def sdiag_single_job_questions(cluster: Cluster) -> int:
    """slurmctld's own count of ``show job ID`` questions."""
    return sdiag_rpcs(cluster, "REQUEST_JOB_INFO_SINGLE")


def flood(spec: str, cluster: str, seconds: float) -> subprocess.Popen:
    """The flood, as another user, for ``seconds``; prints what it sent (JSON) at the end."""
    return subprocess.Popen(["/usr/bin/python3", str(HOSTILE), "flood", spec, cluster, "-",
                             str(seconds)], user="nobody", group="nogroup",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def vm_hwm_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text)[1]) / 1024


def test_a_flood_of_the_tcp_socket_costs_little_and_real_jobs_stay_right(testbed, tmp_path):
    cluster = testbed["22.05"]
    assert hook_configured(cluster) and cluster.hook_socket.startswith("tcp:")
    metrics = f"127.0.0.1:{free_port()}"
    with CcBackend(tmp_path / "cc-backend", [cluster]) as cc:
        daemon = start_daemon(cluster, cc, tmp_path, poll=10, metricsListen=metrics)
        try:
            # the fast path learns what slurmctld's ids look like from a first real job
            warm = submit_batch(cluster, "warm", 1)
            wait_for(lambda: {b["jobId"] for b in cc.started()} >= set(warm), 30,
                     "the first job did not come through the hook")
            questions = sdiag_single_job_questions(cluster)
            log_lines = len(daemon.log.read_text().splitlines())
            attacker = flood(cluster.hook_socket, cluster.name, SECONDS)
            ids = warm + submit_batch(cluster, "flooded", 5)
            out, err = attacker.communicate(timeout=SECONDS + 60)
            assert attacker.returncode == 0, err[-2000:]
            sent: dict[str, int] = json.loads(out.strip().splitlines()[-1])
            wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 60,
                     "the real jobs were not delivered")
            asked = sdiag_single_job_questions(cluster) - questions
            samples = parse(scrape(f"http://{metrics}/metrics"))
            peak = vm_hwm_mb(daemon.proc.pid)
        finally:
            assert daemon.terminate() == 0
        problems = exactly_once(cc, cluster, ids)
    log = daemon.log.read_text().splitlines()[log_lines:]
    about_flood = [ln for ln in log if "dropped" in ln or "does not show" in ln]
    unknown = get(samples, "ccadapter_hook_unknown_jobs_total", cluster=cluster.name)
    drops = {r: get(samples, "ccadapter_hook_messages_dropped_total", reason=r)
             for r in ("invalid", "too_large", "timeout", "unknown_job", "flood", "share")}
    print(f"\nflood: {sum(sent.values())} connections in {SECONDS} s from {CONNECTIONS} at "
          f"a time {dict(sent)}; dropped {drops}; unknown ids asked {unknown:.0f}; slurmctld "
          f"single-job questions {asked}; log lines about it {len(about_flood)}; daemon "
          f"peak RSS {peak:.0f} MB; real jobs {len(ids)}, problems {problems}")
    assert problems == []
    assert sum(sent.values()) > 200
    assert drops["invalid"] and drops["too_large"] and drops["timeout"]
    assert drops["share"] > 0  # a stranger's unknown ids: its share of questions bounds them
    assert unknown <= MAX_UNKNOWN_ASKED
    # every unknown id asked once, and each real job a few times (start, end, script)
    assert asked <= unknown + 4 * len(ids)
    assert len(about_flood) <= 100, "\n".join(about_flood[:20])
    assert peak <= 100
    assert not [ln for ln in log if "Traceback" in ln]
