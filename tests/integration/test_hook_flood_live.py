"""Issue 32 on real Slurm 22.05: the hook's TCP socket under abuse while real jobs run.

For 15 s, 8 connections at a time send what anyone reaching the port could: job ids
slurmctld does not know (far from its own, and a few again and again), garbage, 200 kB
messages and messages never finished. Meanwhile real jobs run and their hooks announce them
on the same socket. Slurm's side is read by the test: slurmctld's own count of single-job
questions (``sdiag``, REQUEST_JOB_INFO_SINGLE) and sacct's view of the real jobs.
"""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ccadapter.prep import hook
from tests.ccbackend import CcBackend
from tests.integration.conftest import hook_configured
from tests.integration.sync_scenario import exactly_once, submit_batch, wait_for
from tests.integration.test_hook_live import start_daemon
from tests.integration.test_metrics_live import free_port, get, parse, scrape
from tests.integration.workload import Cluster

pytestmark = pytest.mark.integration

SECONDS = 15
CONNECTIONS = 8
REPEATED = [3_000_000_001 + i for i in range(5)]  # unknown ids sent again and again
# what a flood may cost at most (ccadapter.prep.guard: a budget of 60 unknown ids, 2 a
# second after that; the rest covers the ids asked while the first answers were on the way)
MAX_UNKNOWN_ASKED = 60 + 2 * 60 + 100


def sdiag_single_job_questions(cluster: Cluster) -> int:
    """slurmctld's own count of ``show job ID`` questions (sdiag's RPC statistics)."""
    out = cluster.run("sdiag")
    m = re.search(r"REQUEST_JOB_INFO_SINGLE\s+\(\s*\d+\)\s+count:(\d+)", out)
    return int(m[1]) if m else 0


def message(job_id: int, cluster: str, context: str) -> bytes:
    return hook.build_message({"SLURM_JOB_ID": str(job_id), "SLURM_SCRIPT_CONTEXT": context,
                               "SLURM_CLUSTER_NAME": cluster})


def flood(address: tuple[str, int], cluster: str, until: float, seed: int,
          sent: Counter[str]) -> None:
    """One connection after another until ``until``, each one kind of abuse."""
    rng = random.Random(seed)
    while time.monotonic() < until:
        kind = rng.choice(["unknown", "unknown", "repeated", "garbage", "large", "half"])
        try:
            with socket.create_connection(address, timeout=3) as sock:
                if kind == "unknown":
                    sock.sendall(message(rng.randrange(10**8, 4 * 10**9), cluster,
                                         rng.choice(["prolog_slurmctld", "epilog_slurmctld"])))
                elif kind == "repeated":
                    sock.sendall(message(rng.choice(REPEATED), cluster, "prolog_slurmctld"))
                elif kind == "garbage":
                    sock.sendall(rng.randbytes(rng.randrange(1, 2000)))
                elif kind == "large":
                    sock.sendall(b'{"SLURM_JOB_ID": "' + b"9" * 200_000)
                else:  # half-sent, never finished: the server gives it a second
                    sock.sendall(b'{"SLURM_JOB_ID": "12')
                    time.sleep(1.2)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(16)
            sent[kind] += 1
        except OSError:  # reset by the server (a large message), or refused under load
            sent[f"{kind} (connection reset)"] += 1


def vm_hwm_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text)[1]) / 1024


def test_a_flood_of_the_tcp_socket_costs_little_and_real_jobs_stay_right(testbed, tmp_path):
    cluster = testbed["22.05"]
    assert hook_configured(cluster) and cluster.hook_socket.startswith("tcp:")
    _, address = hook.parse_spec(cluster.hook_socket)
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
            sent: Counter[str] = Counter()
            until = time.monotonic() + SECONDS
            threads = [threading.Thread(target=flood, args=(address, cluster.name, until, i,
                                                            sent)) for i in range(CONNECTIONS)]
            for thread in threads:
                thread.start()
            ids = warm + submit_batch(cluster, "flooded", 5)
            for thread in threads:
                thread.join()
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
             for r in ("invalid", "too_large", "timeout", "unknown_job", "flood")}
    print(f"\nflood: {sum(sent.values())} connections in {SECONDS} s from {CONNECTIONS} at "
          f"a time {dict(sent)}; dropped {drops}; unknown ids asked {unknown:.0f}; slurmctld "
          f"single-job questions {asked}; log lines about it {len(about_flood)}; daemon "
          f"peak RSS {peak:.0f} MB; real jobs {len(ids)}, problems {problems}")
    assert problems == []
    assert sum(sent.values()) > 200
    assert drops["invalid"] and drops["too_large"] and drops["timeout"]
    assert drops["unknown_job"] + drops["flood"] > 0
    assert unknown <= MAX_UNKNOWN_ASKED
    # every unknown id asked once, and each real job a few times (start, end, script)
    assert asked <= unknown + 4 * len(ids)
    assert len(about_flood) <= 100, "\n".join(about_flood[:20])
    assert peak <= 100
    assert not [ln for ln in log if "Traceback" in ln]
