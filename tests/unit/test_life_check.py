"""The month-of-life run's count (tests/bench/life_check.py): what cc-backend holds against
the workload's runs. A count that cannot find a loss proves nothing."""

from __future__ import annotations

import hostlist
import pytest

from tests.bench.life_check import ASTRAY, CC_STATE, NODES, astray, check
from tests.bench.life_workload import Run, Workload


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload(seed=5, per_day=400, days=1, t0=1_700_000_000)


def held_as_cc_backend_holds(run: Run) -> dict:
    return {"jobId": run.job_id, "startTime": run.start, "duration": run.end - run.start,
            "jobState": CC_STATE.get(run.state, "completed"), "arrayJobId": run.array_job_id,
            "resources": [{"hostname": h} for h in hostlist.expand_hostlist(NODES[run.kind])]}


def everything(workload: Workload, later_of_requeues: bool = False) -> list[dict]:
    """Every run cc-backend should hold: het leaders, one run of each job requeued within
    a day (the first, or the later one)."""
    jobs = []
    for runs in workload.by_id.values():
        for run in runs:
            if not run.ran or (run.het_leader and run.het_offset):
                continue
            first = next((r for r in runs if r.first_of_requeue), None)
            paired = first is not None and runs[1].start - first.start < 86400
            if paired and (run is first) == later_of_requeues:
                continue
            jobs.append(held_as_cc_backend_holds(run))
    return jobs


def test_all_held_once_and_right_counts_nothing(workload):
    v = check(everything(workload), workload)
    assert (v.lost, v.duplicated, v.wrong) == (0, 0, 0), v.problems
    assert v.checked > 300 and v.exceptions["het component (one job in cc-backend)"] > 0


def test_of_a_job_requeued_within_a_day_either_run_may_be_the_held_one(workload):
    v = check(everything(workload, later_of_requeues=True), workload)
    assert (v.lost, v.duplicated, v.wrong) == (0, 0, 0), v.problems


def test_a_missing_a_doubled_and_a_garbled_run_are_each_counted(workload):
    jobs = everything(workload)
    gone, doubled, garbled = jobs[3], jobs[10], dict(jobs[20], duration=1)
    jobs = [j for j in jobs if j is not gone and j is not jobs[20]] + [doubled, garbled]
    jobs.append(dict(jobs[0], startTime=jobs[0]["startTime"] + 7))  # a run Slurm never had
    v = check(jobs, workload)
    assert (v.lost, v.duplicated, v.wrong) == (1, 2, 1), v.problems


def test_the_unreadable_jobs_are_exceptions_not_losses(workload):
    plain = next(r for r in workload.runs if r.kind == "complete" and r.state == "COMPLETED"
                 and len(workload.by_id[r.job_id]) == 1)
    jobs = [j for j in everything(workload) if j["jobId"] != plain.job_id]
    assert check(jobs, workload).lost == 1
    v = check(jobs, workload, poisoned=plain.job_id)
    assert v.lost == 0
    assert v.exceptions["record Slurm cannot print or ccadapter cannot read"] == 1


def test_a_run_the_daemon_said_cc_backend_stopped_with_anothers_stop_is_counted_apart(workload):
    """cc-backend 1.5.4's stop/commit race applies a stop to another job; the daemon replaces
    such a run (deletes it there, sends it again) and says so as an error only where it
    cannot: that run is counted as the race's, a wrong run nobody said is still wrong, and
    a run the daemon said it replaced is counted as cc-backend holds it now."""
    jobs = everything(workload)
    victim, other, replaced = jobs[5], jobs[6], jobs[7]
    jobs[5] = dict(victim, duration=victim["duration"] + 99, jobState="preempted")
    jobs[6] = dict(other, duration=other["duration"] + 1)
    jobs[7] = dict(replaced, duration=replaced["duration"] + 5)
    log = ("ERROR ccadapter.cc.rest_delivery: cc-backend held job "
           f"{victim['jobId']} (c, start {victim['startTime']}) stopped as preempted, Slurm "
           "ended it completed: another run's stop was applied to it (cc-backend 1.5.4 stops "
           "the wrong job when its job cache is committed during a stop); correct it in "
           "cc-backend\n"
           "WARNING ccadapter.cc.rest_delivery: cc-backend held job "
           f"{replaced['jobId']} (c, start {replaced['startTime']}) stopped after 9 s, Slurm "
           "ended it after 4 s: another run's stop was applied to it (cc-backend 1.5.4 stops "
           "the wrong job when its job cache is committed during a stop); deleted there and "
           "sent again, start and stop\n")
    assert astray(log) == {(victim["jobId"], victim["startTime"])}
    v = check(jobs, workload, said_astray=astray(log))
    assert (v.lost, v.duplicated, v.wrong, v.exceptions[ASTRAY]) == (0, 0, 2, 1)


def test_a_wrong_run_showing_a_stop_the_daemon_said_went_astray_is_counted_apart(workload):
    """The job a lost stop was applied to shows that stop's state and duration; the daemon
    says them (lost-stops), and a wrong run showing one is that exception, not wrong."""
    from tests.bench.life_check import stray_stops

    jobs = everything(workload)
    hit, other = jobs[5], jobs[6]
    jobs[5] = dict(hit, duration=882, jobState="completed")
    jobs[6] = dict(other, duration=other["duration"] + 1)
    log = ("WARNING ccadapter.reconcilers.lost_stops: lost-stops: cc-backend still lists 2 "
           "run(s) running whose stop it took minutes ago (its stop/commit race), e.g. job 9; "
           "their stops are sent again. It applied them to other jobs, which now show: "
           "completed 882 s, failed 5 s (replaced where ccadapter finds them: ...)\n")
    assert stray_stops(log) == {("completed", 882), ("failed", 5)}
    v = check(jobs, workload, said_stray=stray_stops(log))
    assert (v.wrong, v.exceptions[ASTRAY]) == (1, 1)
