"""The end of a job that gave all its nodes to the job it expanded (``--dependency=expand:``,
then ``NumNodes=0``), as each release's slurmctld shows it right after the merge and slurmdbd
records it (tests/testbed/record_expand.py; 25.11.7's slurmctld crashes on the merge).
slurmctld shows it COMPLETED with no node and the EndTime of its time limit: built into a Job
alone it is a run that never started, so its epilog sent nothing and cc-backend held it
running; its run, ended at the merge, is slurmdbd's."""

from __future__ import annotations

import dataclasses
from datetime import UTC

import pytest

from ccadapter.model import JobState
from ccadapter.prep.requeued import ended_runs, read_from_slurmdbd
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.text import version_from_meta
from ccadapter.slurm.join import build_job, controller_job
from ccadapter.slurm.resize import fold_resized
from tests.conftest import fixture_json
from tests.unit.prep.test_requeued import Collector, held

EXPANDED = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "26.05")


def shown(version: str):
    return held(version, "scontrol-expanded.txt")


def recorded_runs(version: str):
    """slurmdbd's runs of the base job and the expander, folded as the collector folds."""
    doc = fixture_json(version, "sacct-expanded.json")
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    recs = [parser.parse_sacct_job(r, ParseContext(str(ver), "sacct --json"))
            for r in doc["jobs"]]
    return [dataclasses.replace(build_job(rec, None, "", []), cluster="c")
            for rec in fold_resized(recs)]


@pytest.mark.parametrize("version", EXPANDED)
def test_slurmctld_shows_the_expander_ended_without_a_node_after_a_resize(version, tmp_path):
    ctl, job = shown(version)
    assert ctl.resized and ctl.nodes == () and job.state == "COMPLETED"
    assert job.gave_its_nodes and not job.started and events_for(job) == []
    assert read_from_slurmdbd(job, outbox=None)  # type: ignore[arg-type]  # not asked


@pytest.mark.parametrize("version", EXPANDED)
def test_its_run_from_slurmdbd_ends_at_the_merge_and_is_stopped(version):
    _, job = shown(version)
    found = recorded_runs(version)
    run, unended = ended_runs(Collector(found), [job])
    assert unended == set()
    (gave,) = [r for r in run if r.job_id == job.job_id]
    assert gave.finished and gave.cc_state is JobState.COMPLETED
    assert gave.start_time < gave.end_time < job.end_time  # the merge, not its time limit
    assert [e.kind.name for e in events_for(gave)] == ["START", "STOP"]


@pytest.mark.parametrize("version", EXPANDED)
def test_an_expander_slurmdbd_does_not_show_ended_yet_is_asked_again(version):
    _, job = shown(version)
    found = [r for r in recorded_runs(version) if r.job_id != job.job_id]
    assert ended_runs(Collector(found), [job])[1] == {job.job_id}


def test_a_job_resized_that_keeps_nodes_or_runs_is_slurmctlds_to_tell():
    ctl, job = shown("24.11")
    assert not dataclasses.replace(job, gave_its_nodes=False).gave_its_nodes
    running = controller_job(dataclasses.replace(ctl, state="RUNNING"), "c", UTC, [])
    assert running is not None and not running.gave_its_nodes
    unresized = controller_job(dataclasses.replace(ctl, resized=False), "c", UTC, [])
    assert unresized is not None and not unresized.gave_its_nodes
