"""The collector against real Slurm 22.05, 24.11 and 26.05: its jobs equal Slurm's truth."""

from __future__ import annotations

import pytest

from ccadapter.model import Shared
from tests.integration.workload import sacct_truth

pytestmark = pytest.mark.integration


def by_id(result):
    return {j.job_id: j for j in result.jobs}


def test_every_run_equals_sacct(workload):
    sub, result = workload.sub, workload.final
    truth = sacct_truth(sub.cluster, sub.all_ids())
    jobs = by_id(result)
    assert result.errors == []
    # A job cancelled before its --begin time was never eligible: sacct windows omit it.
    never_eligible = set(sub.ids["cancelpend"])
    assert set(truth) - never_eligible <= set(jobs), f"missing: {set(truth) - set(jobs)}"
    for job_id, t in truth.items():
        if job_id in never_eligible:
            continue
        job = jobs[job_id]
        assert (job.name, job.state) == (t["name"], t["state"]), job_id
        assert (job.submit_time, job.start_time, job.end_time) == (
            t["submit"], t["start"], t["end"]), job_id
        assert job.hostnames == t["nodes"], job_id
        if t["start"]:  # sacct -P AllocCPUS of never-started jobs differs by version
            assert job.num_hwthreads == t["cpus"], job_id
        assert (job.array_job_id, job.array_task_id) == (t["array_job_id"], t["array_task_id"])
        assert job.cluster == sub.cluster.name


def test_cpu_ids_equal_scontrol(workload):
    sub, jobs = workload.sub, by_id(workload.final)
    assert len(sub.truth_cpus) >= 8, "too few running jobs observed"
    for job_id, cpus in sub.truth_cpus.items():
        job = jobs[job_id]
        assert job.allocation_known, job_id
        assert {r.hostname: r.hwthreads for r in job.resources} == cpus, job_id


def test_gpu_indices_equal_scontrol_while_running(workload):
    sub, busy = workload.sub, by_id(workload.busy)
    gpu_id = sub.ids["gpujob"][0]
    expected = {h: tuple(str(i) for i in ids) for h, ids in sub.truth_gpus[gpu_id].items()}
    assert expected == {sub.cluster.gpu_node: expected[sub.cluster.gpu_node]}
    assert len(expected[sub.cluster.gpu_node]) == 1
    assert {r.hostname: r.accelerators for r in busy[gpu_id].resources} == expected
    for job in workload.busy.jobs:  # no other job claims a GPU
        if job.job_id != gpu_id and job.job_id in sub.all_ids():
            assert all(not r.accelerators for r in job.resources), job.job_id


def test_workload_specifics(workload):
    sub, jobs = workload.sub, by_id(workload.final)
    one = {name: jobs[ids[0]] for name, ids in sub.ids.items() if name != "cancelpend"}
    assert one["complete"].state == "COMPLETED" and one["complete"].num_hwthreads == 2
    assert one["fail"].state == "FAILED"
    assert len(one["multinode"].resources) == 2 and one["multinode"].num_hwthreads == 4
    gpu = one["gpujob"]
    assert gpu.num_acc == 1 and gpu.resources[0].hostname == sub.cluster.gpu_node
    tasks = sorted((jobs[i].array_task_id, jobs[i].array_job_id) for i in sub.ids["arr"])
    assert [t for t, _ in tasks] == [1, 2, 3] and len({a for _, a in tasks}) == 1
    assert one["cancelqueued"].state == "CANCELLED" and not one["cancelqueued"].started
    assert one["cancelqueued"].resources == ()
    assert one["cancelrun"].state == "CANCELLED" and one["cancelrun"].started
    assert one["timeout"].state == "TIMEOUT" and one["timeout"].time_limit == 60
    excl = one["excl"]
    assert excl.shared is Shared.NONE and excl.resources[0].hwthreads == (0, 1, 2, 3)
    assert one["complete"].shared is Shared.MULTI_USER
    for job in workload.final.jobs:
        if job.job_id in sub.all_ids() and job.started and job.allocation_known:
            assert job.slurm_info.startswith(f"JobId={job.job_id} ")
            assert job.job_script.startswith("#!/bin/sh"), job.job_id


def test_calls_per_window_do_not_scale(workload):
    runner = workload.runner
    # the listing, then one `sacct --json -j IDS` for its jobs (-B: slurmdbd's scripts too)
    assert runner.calls["sacct"] == 2
    # one scontrol process answers the allocation of every job slurmctld holds and, where
    # slurmdbd stored no script (22.05), its batch script
    assert runner.calls["scontrol"] == 1
    assert set(runner.calls) == {"sacct", "scontrol"}


def test_cli_jobs_json_while_running(workload):
    sub = workload.sub
    views = {v["jobId"]: v for v in workload.busy_cli}
    assert views, "ccadapter jobs printed nothing"
    for job_id in workload.busy_ids:
        if job_id in sub.ids["cancelpend"]:
            continue  # never eligible: in no sacct window
        view = views[job_id]
        if view["started"]:
            body = view["startJob"]
            assert all(r.get("hwthreads") for r in body["resources"]), body
        else:
            assert view["startJob"] is None and "never started" in view["reason"]
    gpu = views[sub.ids["gpujob"][0]]["startJob"]
    assert gpu["resources"][0]["accelerators"] and gpu["numAcc"] == 1
