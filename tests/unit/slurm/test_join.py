"""join.build_job and slurmdbd's stand-in record (issue 13: found by the stricter integration
comparison on Slurm 22.05, where a job read within a second of its start came back from
``sacct --json`` named "allocation", without partition or time limit; cc-backend kept that
start as sent)."""

from __future__ import annotations

import dataclasses

from ccadapter.model import Shared
from ccadapter.slurm.formats.records import ControllerJob, NodeAlloc, SacctRecord
from ccadapter.slurm.join import build_job, placeholder_record

FINAL = SacctRecord(
    job_id=1725, array_job_id=0, array_task_id=None, cluster="cluster22", partition="debug",
    account="testacct", user="root", group="root", name="c0", state="RUNNING",
    submit_time=1795441650, start_time=1795441651, end_time=0, time_limit=31536000,
    nodes=("n1",), num_nodes=1, num_hwthreads=1, num_gpus=0, shared=None, script=None,
    exit_code=None)
# What sacct --json answered for job 1725 of the 22.05 test bed 1 s after its start.
STAND_IN = dataclasses.replace(FINAL, partition="", name="allocation", time_limit=0)
CTL = ControllerJob(
    job_id=1725, state="RUNNING", start_time="1795441651", batch=True,
    shared=Shared.MULTI_USER, nodes=(NodeAlloc("n1", (0,), ()),), text="JobId=1725 ...",
    name="c0", user="root", group="root", account="testacct", partition="debug",
    time_limit=31536000, num_cpus=1)


def test_a_stand_in_record_is_recognised():
    assert placeholder_record(STAND_IN)
    assert not placeholder_record(FINAL)
    assert not placeholder_record(dataclasses.replace(STAND_IN, start_time=0))  # pending


def test_slurmctld_names_the_job_slurmdbd_only_stands_in_for():
    job = build_job(STAND_IN, CTL, "", [])
    assert (job.name, job.partition, job.account, job.time_limit) == (
        "c0", "debug", "testacct", 31536000)
    assert job == build_job(FINAL, CTL, "", [])


def test_a_final_record_stays_slurmdbd_s():
    other = dataclasses.replace(CTL, name="renamed", partition="gpu", time_limit=60)
    job = build_job(FINAL, other, "", [])
    assert (job.name, job.partition, job.time_limit) == ("c0", "debug", 31536000)


def test_without_slurmctld_the_stand_in_is_what_there_is():
    job = build_job(STAND_IN, None, "", [])
    assert (job.name, job.partition) == ("allocation", "")
