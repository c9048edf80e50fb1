"""The collector against real Slurm, every release from 22.05 to 26.05: its jobs equal Slurm's
truth."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from ccadapter.model import Shared
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.formats.listing import ENDED
from ccadapter.slurm.runner import SlurmRunner
from ccadapter.slurm.timefmt import local_zone
from tests.integration.workload import het_merged, sacct_truth

pytestmark = pytest.mark.integration


def by_id(result):
    return {j.job_id: j for j in result.jobs}


def test_every_run_equals_sacct(workload):
    """Every field of every run against sacct's text; all mismatches are reported at once,
    and the counts are printed (``pytest -s``) for the release's record."""
    sub, result = workload.sub, workload.final
    truth = het_merged(sacct_truth(sub.cluster, sub.all_ids()))
    jobs = by_id(result)
    assert result.errors == []
    leader, *components = sub.ids["hetjob"]
    assert list(truth[leader]["components"]) == sub.ids["hetjob"]
    assert not set(components) & set(jobs)  # a het job is one job, under its leader's id
    # A job cancelled before its --begin time was never eligible: sacct windows omit it.
    never_eligible = set(sub.ids["cancelpend"])
    assert set(truth) - never_eligible <= set(jobs), f"missing: {set(truth) - set(jobs)}"
    runs, compared, mismatches = 0, 0, []
    for job_id, t in truth.items():
        if job_id in never_eligible:
            continue
        job = jobs[job_id]
        runs += 1
        pairs = {
            "name": (job.name, t["name"]), "state": (job.state, t["state"]),
            "submit": (job.submit_time, t["submit"]), "start": (job.start_time, t["start"]),
            "end": (job.end_time, t["end"]), "nodes": (job.hostnames, t["nodes"]),
            "array_job_id": (job.array_job_id, t["array_job_id"]),
            "array_task_id": (job.array_task_id, t["array_task_id"]),
            "cluster": (job.cluster, sub.cluster.name),
            "het_components": ([c.job_id for c in job.het_components],
                               list(t.get("components", ()))),
        }
        # sacct -P AllocCPUS of never-started jobs differs by version (1 or 0 for a job
        # cancelled while pending), and such a job may carry its end time as its start
        if t["nodes"]:
            pairs["cpus"] = (job.num_hwthreads, t["cpus"])
        compared += len(pairs)
        mismatches += [f"{job_id} {name}: ours {ours!r}, sacct {theirs!r}"
                       for name, (ours, theirs) in pairs.items() if ours != theirs]
    print(f"\nSlurm {sub.cluster.version}: {runs} runs, "
          f"{compared} fields compared with sacct, {len(mismatches)} mismatches")
    assert mismatches == []


@pytest.mark.parametrize("moment", ["busy", "final"])
def test_polls_list_what_slurmdbds_running_rule_lists(workload, moment):
    """What polls ask (runs that ended in the window, from slurmdbd's end-time index, and the
    jobs that run now, from slurmctld's step list: ccadapter.reconcilers.activity) lists the
    same runs as slurmdbd's RUNNING rule, which reads every queued job's row: while the
    workload runs (array tasks, the het job, the GPU job running) and after it ended."""
    got = getattr(workload, f"{moment}_listings")
    ours = set(workload.sub.all_ids())
    assert got.old <= got.new
    # slurmdbd's RUNNING rule wants an end after the window's start (time_end > START), the
    # ended states an end in it (time_end between START and END): a run that ended in the
    # window's first second is in the second listing only (seen on 24.11: an earlier
    # workload's job)
    assert {run: got.ends[run] for run in got.new - got.old
            if got.ends[run] > int(got.since) + 1} == {}
    assert len({job_id for job_id, _ in got.old} & ours) >= 5
    if moment == "busy":
        assert workload.sub.ids["hetjob"][0] in got.steps


@pytest.mark.parametrize("moment", ["busy", "final"])
def test_step_list_names_the_jobs_slurmctld_runs(workload, moment):
    """Every job of slurmctld's job list in RUNNING or SUSPENDED (squeue -t R,S, read by the
    test) is in the step list the product reads (a het job by its leader at least: its
    batch step); every batch job has its batch step from its start on."""
    got = getattr(workload, f"{moment}_listings")
    assert got.steps <= set(got.running)
    assert {got.running[i] for i in got.steps} == set(got.running.values())
    if moment == "busy":
        assert len(set(got.running) & set(workload.sub.all_ids())) >= 3


def union_by_job(sub, per_id):
    """Slurm's per-job-id view ({id: {host: ids}}) as cc-backend gets it: a het job's
    components' hosts under the leader's id, each host's ids united."""
    leader = {i: sub.ids["hetjob"][0] for i in sub.ids["hetjob"]}
    out = {}
    for job_id, hosts in per_id.items():
        into = out.setdefault(leader.get(job_id, job_id), {})
        for host, ids in hosts.items():
            into[host] = tuple(sorted({*into.get(host, ()), *ids}))
    return out


def test_cpu_ids_equal_scontrol(workload):
    sub, jobs = workload.sub, by_id(workload.final)
    ours = set(sub.all_ids())  # drive() also reads jobs other tests left running
    assert len(ours & set(sub.truth_cpus)) >= 8, "too few running jobs observed"
    assert set(sub.ids["hetjob"]) <= set(sub.truth_cpus), "het job not seen running"
    for job_id, cpus in union_by_job(sub, sub.truth_cpus).items():
        if job_id not in ours:
            continue
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
    het = sub.ids["hetjob"][0]
    het_gpus = {h: tuple(str(i) for i in ids)
                for h, ids in union_by_job(sub, sub.truth_gpus)[het].items() if ids}
    assert het_gpus == {sub.cluster.gpu_node: het_gpus[sub.cluster.gpu_node]}
    assert {r.hostname: r.accelerators for r in busy[het].resources if r.accelerators} == \
        het_gpus and busy[het].num_acc == 1
    for job in workload.busy.jobs:  # no other job claims a GPU
        if job.job_id not in (gpu_id, het) and job.job_id in sub.all_ids():
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
    het = one["hetjob"]  # a GPU component (the leader) and one of 2 CPUs
    hosts = {h for i in sub.ids["hetjob"] for h in sub.truth_cpus[i]}  # as scontrol said
    assert (het.num_hwthreads, het.num_acc, het.num_nodes) == (3, 1, len(hosts))
    assert het.resources[0].hostname == sub.cluster.gpu_node  # the leader's host first
    assert [c.job_id for c in het.het_components] == sub.ids["hetjob"]
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
    leader, *components = sub.ids["hetjob"]
    for job_id in workload.busy_ids:
        if job_id in sub.ids["cancelpend"]:
            continue  # never eligible: in no sacct window
        if job_id in components:  # the het job runs: one job, under its leader's id
            assert job_id not in views
            continue
        view = views[job_id]
        if view["started"]:
            body = view["startJob"]
            assert all(r.get("hwthreads") for r in body["resources"]), body
        else:
            assert view["startJob"] is None and "never started" in view["reason"]
    gpu = views[sub.ids["gpujob"][0]]["startJob"]
    assert gpu["resources"][0]["accelerators"] and gpu["numAcc"] == 1
    het = views[leader]["startJob"]
    assert het["numNodes"] == len(het["resources"]) == 2 and het["numAcc"] == 1
    assert het["metaData"]["hetJobComponents"] == ",".join(
        f"{leader}+{n}={i}" for n, i in enumerate(sub.ids["hetjob"]))


def test_a_window_lists_the_same_runs_whatever_zones_daemon_and_slurm_run_in(workload):
    """Issue 35, item 9(a): the daemon wrote window bounds in its own zone, and sacct read
    them in its own (a chroot without /etc/localtime, another host through the prefix):
    a shift of hours, in which short jobs the hook missed were lost. Here the daemon runs in
    Tokyo and Slurm's commands in Los Angeles, 17 hours apart."""
    cluster = workload.sub.cluster
    since = workload.sub.submitted_at - 5

    def listed(prefix: list[str], zone) -> set[tuple[int, int]]:
        collector = Collector(SlurmRunner(prefix), CollectorSettings(), tz=zone)
        return {s.run for s in collector.stamps(since, asked=ENDED).stamps}

    here = listed(list(cluster.prefix), local_zone())
    apart = listed(["env", "TZ=America/Los_Angeles", *cluster.prefix], ZoneInfo("Asia/Tokyo"))
    assert here and apart == here
