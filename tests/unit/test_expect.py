"""The fault matrix's field comparison (tests/integration/expect.py) catches each field a
product could get wrong, on bodies built by hand from one recorded-looking Slurm answer."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.integration.expect import (
    by_run,
    check_start,
    check_stop,
    delivery_problems,
    lost_and_duplicated,
)
from tests.integration.workload import (
    Allocation,
    controller_records,
    reported_gpus,
    with_reported_gpus,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

T = {"name": "fgpu", "state": "CANCELLED", "submit": 100, "start": 110, "end": 130,
     "nodes": ("n1", "n2"), "cpus": 3, "array_job_id": 0, "array_task_id": None,
     "user": "ccuser", "account": "testacct", "partition": "gpu", "timelimit_min": 5,
     "nnodes": 2, "gpus": 1}
ALLOC = Allocation({"n1": (0, 2), "n2": (1,)}, {"n1": (1,), "n2": ()})
START = {"jobId": 7, "cluster": "c", "user": "ccuser", "project": "testacct",
         "partition": "gpu", "numNodes": 2, "numHwthreads": 3, "numAcc": 1, "arrayJobId": 0,
         "startTime": 110, "walltime": 300, "metaData": {"jobName": "fgpu"},
         "resources": [{"hostname": "n1", "hwthreads": [0, 2], "accelerators": ["1"]},
                       {"hostname": "n2", "hwthreads": [1]}]}
STOP = {"jobId": 7, "cluster": "c", "startTime": 110, "stopTime": 130,
        "jobState": "cancelled"}


def test_a_body_as_slurm_answered_passes():
    v = check_start(START, "c", 7, T, ALLOC)
    assert (v.wrong, v.unverified) == ([], [])
    assert check_stop(STOP, "c", 7, T).wrong == []


@pytest.mark.parametrize(("key", "value"), [
    ("user", "root"), ("project", "root"), ("partition", "debug"), ("numNodes", 1),
    ("numHwthreads", 2), ("numAcc", 0), ("arrayJobId", 6), ("startTime", 111),
    ("walltime", 5), ("cluster", "other"),
])
def test_each_start_field_is_compared(key, value):
    body = {**START, key: value}
    assert any(w.startswith(key) for w in check_start(body, "c", 7, T, ALLOC).wrong)


def test_walltime_absent_only_without_a_limit():
    body = {k: v for k, v in START.items() if k != "walltime"}
    assert check_start(body, "c", 7, T, ALLOC).wrong
    assert check_start(body, "c", 7, {**T, "timelimit_min": None}, ALLOC).wrong == []


def test_hosts_hwthreads_and_accelerators_per_host():
    swapped = copy.deepcopy(START)
    swapped["resources"].reverse()
    assert check_start(swapped, "c", 7, T, ALLOC).wrong
    cpus = copy.deepcopy(START)
    cpus["resources"][1]["hwthreads"] = [3]
    assert check_start(cpus, "c", 7, T, ALLOC).wrong[0].startswith("hwthreads")
    none = copy.deepcopy(START)
    del none["resources"][0]["accelerators"]
    running = {**none, "metaData": {"jobName": "fgpu", "slurmInfo": "JobState=RUNNING"}}
    assert check_start(running, "c", 7, T, ALLOC).wrong[0].startswith("accelerators")
    other = copy.deepcopy(START)
    other["resources"][0]["accelerators"] = ["0"]
    assert check_start(other, "c", 7, T, ALLOC).wrong[0].startswith("accelerators")
    extra = copy.deepcopy(START)
    extra["resources"][1]["accelerators"] = ["0"]
    nogpu = {**T, "gpus": 0}
    assert check_start({**extra, "numAcc": 0}, "c", 7, nogpu, ALLOC).wrong


def test_what_slurmctld_did_not_say_is_unverified_not_passed():
    v = check_start(START, "c", 7, T, None)
    assert v.wrong == [] and len(v.unverified) == 2
    v = check_start(START, "c", 7, T, Allocation(ALLOC.cpus, None))
    assert v.unverified == ["accelerators: the run was not seen running"]


@pytest.mark.parametrize(("key", "value"), [
    ("stopTime", 129), ("jobState", "completed"), ("startTime", 100), ("cluster", "x")])
def test_each_stop_field_is_compared(key, value):
    assert check_stop({**STOP, key: value}, "c", 7, T).wrong


def test_delivery_counts_runs_and_extras():
    truth = {7: T, 8: {**T, "start": 0, "nodes": ()}}
    ok = delivery_problems("c", truth, by_run([START]), by_run([STOP]), {7: ALLOC})
    assert ok == []
    twice = delivery_problems("c", truth, by_run([START, START]), by_run([STOP]), {7: ALLOC})
    assert twice == ["job 7: 2 starts, 1 stops"]
    ghost = {**START, "startTime": 115}
    found = delivery_problems("c", truth, by_run([START, ghost]), by_run([STOP]), {7: ALLOC})
    assert "job 7: a run starting 115 Slurm never had" in found
    never = {**START, "jobId": 8, "startTime": 120}
    found = delivery_problems("c", truth, by_run([START, never]), by_run([STOP]), {7: ALLOC})
    assert "job 8: never started but sent" in found
    lost = delivery_problems("c", truth, by_run([START]), {}, {7: ALLOC})
    assert lost == ["job 7: 1 starts, 0 stops"]
    strict = delivery_problems("c", truth, by_run([START]), by_run([STOP]), {},
                               strict_allocation=True)
    assert len(strict) == 2


def test_gpu_ids_gone_before_the_daemon_read_the_run_are_forgotten_not_wrong():
    none = copy.deepcopy(START)
    del none["resources"][0]["accelerators"]
    ended = {**none, "metaData": {"jobName": "fgpu",
                                  "slurmInfo": "JobId=7 JobName=fgpu\n   JobState=COMPLETED"}}
    v = check_start(ended, "c", 7, T, ALLOC)
    assert v.wrong == [] and v.forgotten[0].startswith("accelerators: none sent")
    absent = check_start(none, "c", 7, T, ALLOC)  # slurmctld no longer held it: no slurmInfo
    assert absent.wrong == [] and absent.forgotten
    running = {**none, "metaData": {"jobName": "fgpu",
                                    "slurmInfo": "JobId=7 JobName=fgpu\n   JobState=RUNNING"}}
    v = check_start(running, "c", 7, T, ALLOC)
    assert v.forgotten == [] and v.wrong[0].startswith("accelerators")
    other = copy.deepcopy(ended)
    other["resources"][0]["accelerators"] = ["0"]  # a wrong id is wrong, read late or not
    assert check_start(other, "c", 7, T, ALLOC).wrong


def test_gpu_indices_a_job_reported_fill_in_where_the_watcher_never_saw_it_running(tmp_path):
    # what GPU_REPORT prints as a job's first line; 12 never began, "x" is no job's file
    (tmp_path / "11").write_text("n1|1\nother output\n")
    (tmp_path / "12").write_text("")
    (tmp_path / "13").write_text("e1|0,3\n")
    (tmp_path / "x").write_text("n1|0\n")
    reported = reported_gpus(tmp_path)
    assert reported == {11: {"n1": (1,)}, 13: {"e1": (0, 3)}}
    seen = Allocation({"n1": (0,)}, {"n1": (2,)})  # the watcher's word stands
    merged = with_reported_gpus({10: seen, 11: Allocation({"n1": (0, 2)}, None)}, reported)
    assert merged == {10: seen, 11: Allocation({"n1": (0, 2)}, {"n1": (1,)}),
                      13: Allocation({}, {"e1": (0, 3)})}
    t = {**T, "nodes": ("n1",), "nnodes": 1, "cpus": 2}
    body = {**START, "numNodes": 1, "numHwthreads": 2,
            "resources": [{"hostname": "n1", "hwthreads": [0, 2], "accelerators": ["1"]}]}
    assert check_start(body, "c", 7, t, Allocation({"n1": (0, 2)}, None)).unverified != []
    v = check_start(body, "c", 7, t, merged[11])
    assert (v.wrong, v.unverified) == ([], [])
    wrong_gpu = {**body, "resources": [{**body["resources"][0], "accelerators": ["0"]}]}
    assert check_start(wrong_gpu, "c", 7, t, merged[11]).wrong != []


def test_no_report_folder_reports_nothing(tmp_path):
    assert reported_gpus(tmp_path / "absent") == {}


# slurmdbd's record of a job whose start message was lost while slurmdbd was down (22.05,
# CI run of 7daf177, job 5807): sacct prints JobName "allocation" and no Partition.
PLACEHOLDER = {**T, "name": "allocation", "partition": ""}


def test_a_dbd_placeholder_is_compared_with_slurmctld_name_and_partition():
    held = Allocation(ALLOC.cpus, ALLOC.gpus, "fgpu", "gpu")
    v = check_start(START, "c", 7, PLACEHOLDER, held)
    assert (v.wrong, v.unverified) == ([], [])
    renamed = {**START, "metaData": {"jobName": "allocation"}}
    assert check_start(renamed, "c", 7, PLACEHOLDER, held).wrong == [
        "metaData.jobName 'allocation' != Slurm's 'fgpu'"]
    moved = {**START, "partition": "debug"}
    assert check_start(moved, "c", 7, PLACEHOLDER, held).wrong == [
        "partition 'debug' != Slurm's 'gpu'"]


def test_a_dbd_placeholder_slurmctld_never_read_is_unverified_not_passed():
    v = check_start(START, "c", 7, PLACEHOLDER, ALLOC)  # no name: slurmctld not read
    assert v.wrong == []
    assert v.unverified == ["jobName, partition: slurmdbd holds a placeholder, slurmctld not read"]
    assert check_start(START, "c", 7, PLACEHOLDER, None).unverified[0].startswith("jobName")
    # a real sacct name is never replaced: only the placeholder's pair is
    assert check_start(START, "c", 7, {**T, "name": "allocation"}, ALLOC).wrong == [
        "metaData.jobName 'fgpu' != Slurm's 'allocation'"]


@pytest.mark.parametrize(("version", "job_id", "name", "partition"), [
    ("22.05", 7, "cancelrun", "debug"), ("26.05", 5, "gpujob", "gpu")])
def test_controller_records_read_name_and_partition(version, job_id, name, partition):
    text = (FIXTURES / version / f"scontrol-d-{job_id}.txt").read_text()
    rec = controller_records(text)[job_id]
    assert (rec.name, rec.partition) == (name, partition)


def test_lost_and_duplicated_count_runs_not_problem_lines():
    truth = {7: T, 8: {**T, "start": 200}, 9: {**T, "start": 300},
             10: {**T, "start": 0, "nodes": ()}}  # 10 never ran: nothing expected
    starts = by_run([START, {**START, "jobId": 8, "startTime": 200},
                     {**START, "jobId": 8, "startTime": 200}])
    stops = by_run([STOP, {**STOP, "jobId": 8, "startTime": 200}])
    assert lost_and_duplicated(truth, starts, stops) == (1, 1)  # 9 lost, 8 twice started
    assert lost_and_duplicated({7: T}, starts, stops) == (0, 0)
