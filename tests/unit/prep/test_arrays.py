"""One batch script asked per array job (issue 47): the tasks of an array run one script,
which slurmctld answers per task; the fast path asks one task's and gives it to the rest."""

import json
import threading
from zoneinfo import ZoneInfo

import pytest

from ccadapter.model import Job, Resource
from ccadapter.outbox import Outbox
from ccadapter.prep.arrays import ArrayScripts
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookEvent, HookMessage, parse_message
from ccadapter.retry import RetryPolicy
from ccadapter.slurm.collector import Collector
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm
from tests.unit.prep.test_fastpath import wait

SCRIPT = "#!/bin/sh\nsleep 1\n"


def task(job_id: int, array: int, script: str = "", started: bool = True) -> Job:
    return Job(job_id=job_id, cluster="c", partition="p", account="a", user="u", group="g",
               name="n", state="RUNNING", submit_time=1, start_time=2 if started else 0,
               end_time=0, time_limit=60, num_nodes=1, num_hwthreads=1, num_acc=0,
               shared=None, resources=(Resource("n1", (0,), ()),) if started else (),
               array_job_id=array, job_script=script)


def test_one_task_of_each_array_is_asked_and_every_other_start():
    arrays = ArrayScripts()
    for job_id in (11, 12, 13):
        arrays.note(job_id, 10)
    arrays.note(21, 20)
    arrays.note(30, 0)  # no array task
    assert arrays.to_ask({11, 12, 13, 21, 30, 40}) == {11, 21, 30, 40}


def test_a_script_read_is_kept_and_given_to_the_arrays_other_tasks():
    arrays = ArrayScripts()
    for job_id in (11, 12):
        arrays.note(job_id, 10)
    got = arrays.fill([task(11, 10, SCRIPT), task(12, 10), task(13, 99),
                       task(14, 10, started=False)])
    assert [j.job_script for j in got] == [SCRIPT, SCRIPT, "", ""]
    arrays.note(15, 10)
    assert arrays.to_ask({15}) == set()  # kept: not asked again
    assert arrays.fill([task(15, 10)])[0].job_script == SCRIPT
    arrays.part_done([15], [11, 12, 15])
    assert arrays.to_ask({11}) == {11}  # no longer announced as a task: asked as any start


def test_only_the_last_arrays_scripts_are_kept():
    arrays = ArrayScripts(keep=2)
    arrays.fill([task(1, 1, "a"), task(2, 2, "b"), task(3, 3, "c")])
    for job_id, array in ((4, 1), (5, 2), (6, 3)):
        arrays.note(job_id, array)
    assert arrays.to_ask({4, 5, 6}) == {4}  # array 1's, the oldest, was let go


@pytest.mark.parametrize(("value", "array"), [("334", 334), ("x", 0), ("0", 0), (7, 0),
                                              ("99999999999", 0)])
def test_the_hook_message_names_its_array_and_an_unreadable_one_costs_nothing(value, array):
    msg = parse_message(json.dumps({"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld",
                                    "SLURM_JOB_ID": "339", "SLURM_ARRAY_JOB_ID": value,
                                    "SLURM_CLUSTER_NAME": "c"}).encode(), None)
    assert (msg.job_id, msg.array_job_id) == (339, array)


def test_the_fast_path_asks_one_script_for_an_arrays_tasks(tmp_path):
    """24.11's three tasks of "arr" (the workload's --array=1-3), ended in the recording:
    their starts cost slurmctld one batch script, not three, and each carries it."""
    tasks = fixture_json("24.11", "testbed/workload.json")["ids"]["arr"]
    runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"),
                           fixture_text("24.11", "testbed/scontrol-d-final.txt"),
                           controller_script=lambda job_id: SCRIPT)
    box = Outbox(tmp_path / "o.sqlite")
    fast = FastPath(Collector(runner, collector_settings(), tz=ZoneInfo("UTC")), box,
                    threading.Event().set, retry=RetryPolicy(0.05, 0.05, 3)).start()
    try:
        for job_id in tasks:
            fast.submit(HookMessage(job_id, HookEvent.START, None, array_job_id=min(tasks)))
        assert wait(lambda: len([e for e in box.queue.due() if e.kind == "start"]) == 3)
        starts = [e.payload for e in box.queue.due() if e.kind == "start"]
    finally:
        fast.stop()
        box.close()
    asked = [line for stdin in runner.stdins for line in stdin.splitlines()
             if line.startswith("write batch_script")]
    assert len(asked) == 1
    assert sorted(s["jobId"] for s in starts) == sorted(tasks)
    assert all(s["metaData"]["jobScript"] == SCRIPT for s in starts)


def test_a_script_answered_while_the_task_configures_is_kept_for_the_array(tmp_path):
    """Under a burst slurmctld holds tasks CONFIGURING while their prologs run: the task asked
    for the array's script is asked again later, and the script answered with it was dropped,
    so the next part asked again (224 scripts for one 2,000-task array on a loaded
    clusterscale). Kept, the array's script is asked once."""
    tasks = fixture_json("24.11", "testbed/workload.json")["ids"]["arr"]
    final = fixture_text("24.11", "testbed/scontrol-d-final.txt")
    configuring = final.replace("JobState=COMPLETED", "JobState=CONFIGURING")
    runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"),
                           configuring, controller_script=lambda job_id: SCRIPT)
    box = Outbox(tmp_path / "o.sqlite")
    fast = FastPath(Collector(runner, collector_settings(), tz=ZoneInfo("UTC")), box,
                    threading.Event().set, retry=RetryPolicy(0.05, 0.05, 3)).start()
    try:
        fast.submit(HookMessage(tasks[0], HookEvent.START, None, array_job_id=min(tasks)))
        assert wait(lambda: len(runner.stdins) >= 2)  # asked, and asked again: configuring
        runner.controller = final
        for job_id in tasks[1:]:
            fast.submit(HookMessage(job_id, HookEvent.START, None, array_job_id=min(tasks)))
        assert wait(lambda: len([e for e in box.queue.due() if e.kind == "start"]) == 3)
    finally:
        fast.stop()
        box.close()
    asked = [line for stdin in runner.stdins for line in stdin.splitlines()
             if line.startswith("write batch_script")]
    assert len(asked) == 1
