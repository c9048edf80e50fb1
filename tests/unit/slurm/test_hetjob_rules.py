"""The merging rules of :mod:`ccadapter.slurm.hetjob` on cases the test bed cannot produce
(two components on one host, a requeued het job, a component without its leader). The
recorded het jobs of every Slurm version are in ``test_hetjob.py``."""

from dataclasses import replace

import pytest

from ccadapter.cc.payload import NotSendable, energy_meta_body, start_job_body, stop_job_body
from ccadapter.model import HetComponent, Job, Resource, Shared
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.slurm.formats.listing import RunStamp
from ccadapter.slurm.hetjob import SLACK, het_state, merge_jobs, merge_stamps


def part(job_id, offset, leader=11, start=100, end=200, state="COMPLETED", **kw):
    """A het job's component as the collector reads it, before the merge."""
    fields = dict(job_id=job_id, cluster="c", partition="debug", account="a", user="u",
                  group="g", name="het", state=state, submit_time=50, start_time=start,
                  end_time=end, time_limit=600, num_nodes=1, num_hwthreads=1, num_acc=0,
                  shared=Shared.MULTI_USER, resources=(Resource("n1", (0,)),),
                  slurm_info=f"JobId={job_id} HetJobId={leader}", job_script="",
                  allocation_known=True,
                  het_components=(HetComponent(leader, offset, job_id),))
    fields.update(kw)
    return Job(**fields)


def test_two_components_on_one_host_make_one_resource_with_the_union():
    lead = part(11, 0, resources=(Resource("n1", (0, 1), ("0",)),), num_hwthreads=2,
                num_acc=1, job_script="#!/bin/sh\n")
    comp = part(12, 1, resources=(Resource("n2", (0,)), Resource("n1", (3, 1), ("1", "0"))),
                num_hwthreads=3, num_acc=1, num_nodes=2, partition="gpu")
    (job,) = merge_jobs([lead, comp])
    assert job.job_id == 11 and job.het_components == (HetComponent(11, 0, 11),
                                                       HetComponent(11, 1, 12))
    assert job.resources == (Resource("n1", (0, 1, 3), ("0", "1")), Resource("n2", (0,)))
    assert (job.num_nodes, job.num_hwthreads, job.num_acc) == (2, 5, 2)
    assert job.partition == "debug,gpu" and job.job_script == "#!/bin/sh\n"
    body = start_job_body(job)
    assert body["numNodes"] == len(body["resources"]) == 2
    assert body["metaData"]["hetJobComponents"] == "11+0=11,11+1=12"
    assert body["metaData"]["slurmInfo"] == "JobId=11 HetJobId=11\n\nJobId=12 HetJobId=11"


def test_order_of_parts_does_not_matter_and_other_jobs_keep_their_place():
    plain = replace(part(5, 0), het_components=())
    lead, comp = part(11, 0), part(12, 1, resources=(Resource("n2", (1,)),))
    assert merge_jobs([plain, comp, lead]) == merge_jobs([plain, lead, comp])
    assert [j.job_id for j in merge_jobs([comp, plain, lead])] == [11, 5]
    assert merge_jobs([plain]) == [plain]


@pytest.mark.parametrize(("states", "expected"), [
    ([("COMPLETED", True), ("COMPLETED", True)], "COMPLETED"),
    ([("COMPLETED", True), ("CANCELLED", True)], "CANCELLED"),  # scancel 11+1
    ([("COMPLETED", True), ("COMPLETED", True), ("OUT_OF_MEMORY", True)], "OUT_OF_MEMORY"),
    ([("FAILED", True), ("CANCELLED", True)], "FAILED"),  # the leader's
    ([("TIMEOUT", True), ("COMPLETED", True)], "TIMEOUT"),
    ([("COMPLETED", True), ("RUNNING", False)], "RUNNING"),  # not over until the last part
    ([("RUNNING", False), ("CANCELLED", True)], "RUNNING"),
    ([("PENDING", False), ("PENDING", False)], "PENDING"),
    # a component's PrologSlurmctld still runs: the het job's start is not final either
    ([("RUNNING", False), ("CONFIGURING", False)], "CONFIGURING"),
])
def test_state(states, expected):
    assert het_state(states) == expected


def test_a_run_ends_when_its_last_component_ends():
    lead = part(11, 0, state="RUNNING", end=0)
    comp = part(12, 1, state="CANCELLED", end=150)
    (running,) = merge_jobs([lead, comp])
    assert running.started and not running.finished and running.end_time == 0
    assert [e.kind for e in events_for(running)] == ["start"]
    with pytest.raises(NotSendable):
        stop_job_body(running)
    (ended,) = merge_jobs([replace(lead, state="COMPLETED", end_time=300), comp])
    assert ended.finished and ended.state == "CANCELLED"
    assert stop_job_body(ended)["stopTime"] == 300


def test_energy_is_what_slurm_accounted_to_the_components_summed():
    lead, comp = part(11, 0, energy=500), part(12, 1, energy=250)
    (job,) = merge_jobs([lead, comp])
    assert job.energy == 750 and energy_meta_body(job)["payload"]["value"] == "750"
    assert energy_meta_body(job)["jobId"] == 11
    # sbatch --wrap runs steps in the leader only: the other component has no energy
    (wrap,) = merge_jobs([lead, replace(comp, energy=None)])
    assert wrap.energy == 500
    (none,) = merge_jobs([replace(lead, energy=None), replace(comp, energy=None)])
    assert none.energy is None and energy_meta_body(none) is None


def test_the_start_waits_while_a_component_is_configuring():
    lead = part(11, 0, state="RUNNING", end=0)
    comp = part(12, 1, state="CONFIGURING", end=0)
    (job,) = merge_jobs([lead, comp])
    assert not job.started and events_for(job) == []
    (running,) = merge_jobs([lead, replace(comp, state="RUNNING")])
    assert running.started and [e.kind for e in events_for(running)] == ["start"]


def test_requeued_runs_pair_by_start_and_a_component_without_its_leader_is_left_out():
    first = [part(11, 0, start=100, end=150, state="REQUEUED"),
             part(12, 1, start=100 + SLACK, end=150, state="REQUEUED")]
    second = [part(11, 0, start=400, end=500), part(12, 1, start=401, end=520)]
    orphan = part(12, 1, start=900, end=950)
    jobs = merge_jobs([*second, orphan, *first, second[0]])  # a part seen twice counts once
    assert [(j.job_id, j.start_time, j.end_time, j.state) for j in jobs] == [
        (11, 100, 150, "REQUEUED"), (11, 400, 520, "COMPLETED")]
    assert all(len(j.het_components) == 2 for j in jobs)
    assert merge_jobs([orphan]) == []


def test_sharing_limit_and_allocation_follow_the_weakest_part():
    lead = part(11, 0, shared=Shared.NONE, time_limit=600)
    comp = part(12, 1, shared=Shared.SINGLE_USER, time_limit=1200, allocation_known=False)
    (job,) = merge_jobs([lead, comp])
    assert job.shared is Shared.SINGLE_USER and job.time_limit == 1200
    assert not job.allocation_known
    (unlimited,) = merge_jobs([lead, replace(comp, time_limit=0)])
    assert unlimited.time_limit == 0


def test_a_component_alone_is_never_sent():
    comp = part(12, 1)
    assert comp.het_part and events_for(comp) == []
    for body in (start_job_body, stop_job_body):
        with pytest.raises(NotSendable, match="component of het job 11"):
            body(comp)
    (job,) = merge_jobs([part(11, 0), comp])
    assert not job.het_part and job.slurm_ids == (11, 12)


def stamp(job_id, offset, start=100, end=200, state="COMPLETED", nodes="n1", leader=11):
    return RunStamp(job_id, start, end, state, nodes, HetComponent(leader, offset, job_id))


def test_stamps_of_a_het_job_become_one_under_the_leaders_id():
    plain = RunStamp(5, 100, 0, "RUNNING", "n2")
    stamps = merge_stamps([stamp(12, 1, end=150, state="CANCELLED", nodes="n2"), plain,
                           stamp(11, 0, end=0, state="RUNNING", nodes="n[1-2]")])
    assert stamps == [RunStamp(11, 100, 0, "RUNNING", "n[1-2],n2"), plain]
    assert stamps[0].started and not stamps[0].finished
    (ended,) = merge_stamps([stamp(11, 0, end=300), stamp(12, 1, end=150, state="CANCELLED")])
    assert ended.run == (11, 100) and ended.finished and ended.end_time == 300
    assert ended.state == "CANCELLED"
    # listed without its leader: one stamp under the leader's id all the same
    (alone,) = merge_stamps([stamp(12, 1, start=101)])
    assert alone.job_id == 11 and alone.start_time == 101
