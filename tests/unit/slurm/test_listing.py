"""slurmctld's step list, as polls read it for the jobs that run now, on recorded answers of
22.05, 24.11 and 26.05 (tests/fixtures/<version>/steps-busy.json, taken while the workload's
GPU job and het job ran): it names the jobs its job list shows running."""

from __future__ import annotations

from ccadapter.slurm.formats.listing import STEP_FIELDS, parse_step_jobs
from ccadapter.slurm.formats.records import ParseContext
from tests.conftest import fixture_json
from tests.integration.workload import running_leaders

CTX = ParseContext("24.11.5", "squeue -s")


def test_the_step_list_names_every_running_job(version):
    """A het job's component with a step of its own is named by its own id (22.05 has no
    het field for steps); the leader always has the batch step."""
    recorded = fixture_json(version, "steps-busy.json")
    assert recorded["step_fields"] == STEP_FIELDS
    ids, errors = parse_step_jobs(recorded["steps"], CTX)
    running = running_leaders(recorded["jobs"])
    assert running is not None
    assert errors == []
    assert ids <= set(running)
    assert {running[i] for i in ids} == set(running.values())
    assert len(set(running.values())) < len(running)  # the het job's component runs too


def test_array_tasks_and_het_components():
    # as 22.05 printed them on clusterscale: array tasks (each its raw id), a srun step, a
    # het job's leader and its component (its own id, its own step)
    out = ("100784|100784_3.batch|\n100825|100784_1.batch|\n100791|100791.0|\n"
           "100791|100791.batch|\n129482|129482.0|\n129482|129482.batch|\n"
           "129483|129483.0|\n")
    assert parse_step_jobs(out, CTX) == ({100784, 100825, 100791, 129482, 129483}, [])


def test_an_unreadable_line_is_reported_not_fatal():
    ids, errors = parse_step_jobs("12|12.batch|\ngarbage\n", CTX)
    assert ids == {12}
    assert len(errors) == 1 and "24.11.5" in errors[0] and "squeue -s" in errors[0]
