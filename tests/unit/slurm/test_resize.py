"""A job shrunk while it ran (``scontrol update JobId=.. NumNodes=1``), as 22.05, 24.11 and
26.05 record it (tests/testbed/record_resize.py): one run from its start to its end (issue 46).
On 24.11 and 26.05 the second record starts at the resize, and the first reads
``["PENDING", "RESIZING"]``: read as they were, a second run (refused by cc-backend) and a
first one never stopped."""

from __future__ import annotations

import dataclasses
from datetime import UTC

import pytest

from ccadapter.model import JobState, cc_state
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.listing import parse_listing
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.text import version_from_meta
from ccadapter.slurm.join import build_job
from ccadapter.slurm.resize import fold_resized
from ccadapter.slurm.timefmt import local_zone, readings
from tests.conftest import fixture_json, fixture_text

RESIZED = ("22.05", "24.11", "26.05")
# a job grown by another (``--dependency=expand:``, tests/testbed/record_expand.py); 25.11.7's
# slurmctld crashes on the merge
EXPANDED = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "26.05")


def records(version: str, name: str = "sacct-resized.json"):
    doc = fixture_json(version, name)
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    return [parser.parse_sacct_job(r, ParseContext(str(ver), "sacct --json"))
            for r in doc["jobs"]]


@pytest.mark.parametrize("version", RESIZED)
def test_the_records_of_a_resize_read_as_resizing_then_the_end(version):
    first, second = sorted(records(version), key=lambda r: (r.start_time, r.end_time))
    assert first.state == "RESIZING" and second.state == "COMPLETED"
    assert first.end_time <= second.start_time or first.start_time == second.start_time
    assert len(first.nodes) == 2 and len(second.nodes) == 1


@pytest.mark.parametrize("version", RESIZED)
def test_a_resized_job_is_one_run_from_its_start_to_its_end(version):
    raw = records(version)
    first, second = sorted(raw, key=lambda r: (r.start_time, r.end_time))
    (run,) = fold_resized(raw)
    assert (run.job_id, run.start_time, run.submit_time) == (first.job_id, first.start_time,
                                                             first.submit_time)
    assert (run.state, run.end_time, run.exit_code) == ("COMPLETED", second.end_time, 0)
    assert run.nodes == first.nodes and run.resized  # the allocation it started with


@pytest.mark.parametrize("version", RESIZED)
def test_a_resized_job_whose_second_record_is_not_stored_yet_still_runs(version):
    first = min(records(version), key=lambda r: (r.start_time, r.end_time))
    (run,) = fold_resized([first])
    assert run.end_time == 0 and cc_state(run.state) is JobState.RUNNING


@pytest.mark.parametrize("version", RESIZED)
def test_the_listing_of_a_resized_job_is_one_run(version):
    stamps, errors = parse_listing(fixture_text(version, "sacct-resized.txt"),
                                   ParseContext(version, "sacct -P"))
    assert not errors and len(stamps) == 2
    (run,) = fold_resized(stamps)
    assert run.start_time == min(s.start_time for s in stamps)
    assert run.end_time == max(s.end_time for s in stamps) and run.finished
    assert run.state == "COMPLETED" and "[" in run.nodes  # both nodes, as it started


@pytest.mark.parametrize("version", RESIZED)
def test_slurmctld_keeps_the_start_and_the_run_keeps_its_first_allocation(version):
    jobs, errors = parse_scontrol_jobs(fixture_text(version, "scontrol-resized.txt"),
                                       ParseContext(version, "scontrol -d show job"))
    (run,) = fold_resized(records(version))
    assert not errors and list(jobs) == [run.job_id]
    ctl = jobs[run.job_id]
    assert run.start_time in readings(ctl.start_time, UTC) or \
        run.start_time in readings(ctl.start_time, local_zone())  # its StartTime, kept
    assert len(ctl.nodes) == 1  # shrunk
    job = build_job(run, ctl, "", [])
    assert sorted(r.hostname for r in job.resources) == sorted(run.nodes)
    # read before the resize, slurmctld's answer after it: the record's allocation too
    unfolded = build_job(dataclasses.replace(run, resized=False), ctl, "", [])
    assert sorted(r.hostname for r in unfolded.resources) == sorted(run.nodes)
    same = build_job(dataclasses.replace(run, nodes=(ctl.nodes[0].hostname,)), ctl, "", [])
    assert [(r.hostname, r.hwthreads) for r in same.resources] == [
        (ctl.nodes[0].hostname, ctl.nodes[0].cpu_ids)]  # slurmctld's CPU ids where they agree


def test_other_records_keep_their_place_and_a_requeue_after_a_resize_is_a_run_of_its_own():
    (one,) = fold_resized(records("24.11"))
    base = dataclasses.replace(one, resized=False)
    other = dataclasses.replace(base, job_id=one.job_id + 1, state="FAILED")
    shrink = dataclasses.replace(base, state="RESIZING", end_time=base.start_time + 5)
    rest = dataclasses.replace(base, state="REQUEUED", start_time=base.start_time + 5,
                               end_time=base.start_time + 9)
    again = dataclasses.replace(base, start_time=base.start_time + 100,
                                end_time=base.start_time + 200)
    out = fold_resized([other, rest, shrink, again])
    assert [r.job_id for r in out] == [other.job_id, one.job_id, one.job_id]
    assert out[0] is other
    assert (out[1].start_time, out[1].end_time, out[1].state) == (
        base.start_time, base.start_time + 9, "REQUEUED")
    assert out[2] is again
    assert fold_resized([other]) == [other]


def expanded(version: str):
    """The base job's records and the expander's, each in order."""
    by_id: dict[int, list] = {}
    for rec in records(version, "sacct-expanded.json"):
        by_id.setdefault(rec.job_id, []).append(rec)
    base, expander = (sorted(recs, key=lambda r: (r.start_time, r.end_time or float("inf")))
                      for _, recs in sorted(by_id.items()))
    return base, expander


@pytest.mark.parametrize("version", EXPANDED)
def test_the_records_of_an_expansion_leave_the_expander_a_record_that_never_ends(version):
    base, expander = expanded(version)
    assert [r.state for r in base] == ["RESIZING", "COMPLETED"]
    assert len(base[0].nodes) == 1 and len(base[1].nodes) == 2 and base[1].end_time
    assert [r.state for r in expander] == ["RESIZING", "COMPLETED"]
    assert len(expander[0].nodes) == 1 and expander[0].end_time
    assert expander[1].nodes == () and expander[1].end_time == 0  # for good


@pytest.mark.parametrize("version", EXPANDED)
def test_the_job_that_gave_its_node_ended_at_the_merge_and_the_base_job_is_one_run(version):
    base, expander = expanded(version)
    grown, gave = fold_resized([*base, *expander])
    assert (grown.job_id, grown.start_time, grown.end_time) == (
        base[0].job_id, base[0].start_time, base[1].end_time)
    assert grown.nodes == base[0].nodes and cc_state(grown.state) is JobState.COMPLETED
    assert (gave.job_id, gave.start_time, gave.end_time) == (
        expander[0].job_id, expander[0].start_time, expander[0].end_time)
    assert gave.nodes == expander[0].nodes and cc_state(gave.state) is JobState.COMPLETED


@pytest.mark.parametrize("version", EXPANDED)
def test_the_listing_of_an_expansion_is_two_runs_that_end(version):
    stamps, errors = parse_listing(fixture_text(version, "sacct-expanded.txt"),
                                   ParseContext(version, "sacct -P"))
    assert not errors and len(stamps) == 4
    grown, gave = fold_resized(stamps)
    merge = min(s.end_time for s in stamps if s.end_time)
    assert grown.finished and gave.finished and gave.end_time == merge
    for run in (grown, gave):  # the allocation it started with: its RESIZING record's
        assert run.nodes == next(s.nodes for s in stamps
                                 if s.job_id == run.job_id and s.state == "RESIZING")
