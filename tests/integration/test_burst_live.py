"""A burst at slurmctld (issue 47, CI size): with 5,000 jobs queued, a 2,000-task array, an
array of one task per CPU cancelled at once, and 20 jobs a second for 30 s go through
clusterscale's PrologSlurmctld/EpilogSlurmctld while ``ccadapter daemon`` (hook and poll)
delivers them to the real cc-backend. slurmctld's own counters (sdiag) say what the daemon
asked: at most 1.5 job RPCs per job over the burst beside 22.05's single-job scripts (its
slurmdbd JSON has none: each is a second RPC), at most 1.5 ``show job`` per job in every leg
(its start's, again while CONFIGURING; ends are read from slurmdbd), about one batch script
per array job, and no dump of every job (REQUEST_JOB_INFO) with 5,000 queued. Every run is
held exactly once with Slurm's fields. The full size (50,000 queued, a 10,000-task array) is
``python -m tests.bench.burst``."""

from __future__ import annotations

import pytest

from tests.bench.burst import JOB_RPCS, Plan, ccadapter_legs
from tests.integration.scale_bed import ScaleCluster
from tests.testbed.load import Load

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = Plan(queued=5_000, tasks=2_000, rate=20, steady=30, poll=30)
PID_FILE = "/run/slurmctld-scale.pid"


def test_a_burst_costs_slurmctld_at_most_one_and_a_half_rpcs_a_job(scale_testbed: ScaleCluster,
                                                                   tmp_path):
    bed = scale_testbed
    cluster = bed.cluster
    load = Load(cluster.prefix, tmp_path / "submitted.jsonl")
    load.cancel_all()
    try:
        fill = load.fill(PLAN.queued)
        assert fill.submitted >= PLAN.queued, fill
        legs, log = ccadapter_legs(cluster, bed.hook_socket, PID_FILE, tmp_path, PLAN)
    finally:
        load.cancel_all()
        load.close()
    assert "Traceback" not in log
    for leg in legs:
        print(f"\n{leg.name}: {leg.jobs} jobs in {leg.seconds:.0f} s, job RPCs "
              f"{ {k: leg.rpcs.get(k, 0) for k in JOB_RPCS} } = {leg.job_rpcs / leg.jobs:.2f}"
              f"/job; slurmctld CPU {leg.ctld_cpu_s:.1f} s; squeue --me {leg.squeue_ms}; "
              f"start {leg.start_s} stop {leg.stop_s}")
        assert leg.problems == [], (leg.name, leg.problems[:10])
        assert leg.rpcs.get("REQUEST_JOB_INFO", 0) == 0, (leg.name, leg.rpcs)  # no dump
        # a start's show job, once per job and again while slurmctld holds it CONFIGURING
        # (1.01 unloaded, 1.40 with the unit suite beside it); an end asks slurmctld nothing
        assert leg.rpcs.get("REQUEST_JOB_INFO_SINGLE", 0) <= 1.5 * leg.jobs, leg.rpcs
    arrays = {leg.name: leg for leg in legs}
    # one batch script per array job is the aim (1 to 8 seen on a quiet machine); on a loaded
    # one the array leg asked 139 (a part whose asked task came back without its script asks
    # again: open in issue 47). The bound catches the per-task asking (2,000) it replaced.
    for name in ("array", "cancel"):
        bound = max(50, arrays[name].jobs // 10)
        assert arrays[name].rpcs.get("REQUEST_BATCH_SCRIPT", 0) <= bound, arrays[name].rpcs
    # 22.05's sacct JSON holds no script: each single job's is slurmctld's, a second RPC
    # (none with slurmFetchJobScripts false); the rest of the burst: at most 1.5 a job
    floor = arrays["steady"].rpcs.get("REQUEST_BATCH_SCRIPT", 0)
    assert floor <= arrays["steady"].jobs + 10
    total = sum(leg.job_rpcs for leg in legs) / sum(leg.jobs for leg in legs)
    beyond = (sum(leg.job_rpcs for leg in legs) - floor) / sum(leg.jobs for leg in legs)
    print(f"\nthe whole burst: {total:.2f} job RPCs per job, {beyond:.2f} without 22.05's "
          "single-job scripts")
    assert beyond <= 1.5
