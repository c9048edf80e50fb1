"""``sacct --json -j IDS`` batch by batch (issue 35, item 2): a record that breaks its batch
costs its own job only; what fails whatever is asked is raised, not hunted."""

import pytest

from ccadapter.errors import SlurmParseError, TransientSlurmError
from ccadapter.slurm.details import DetailReader
from tests.conftest import fixture_json
from tests.fakeslurm import RecordedSlurm


def reader(slurm):
    return DetailReader(slurm, lambda: "24.11.5", lambda version: None)


def recorded():
    doc = fixture_json("24.11", "testbed/sacct-window.json")
    return doc, sorted({r["job_id"] for r in doc["jobs"]})


@pytest.mark.parametrize("how", ["exit", "cut"])
def test_two_bad_records_in_either_half_are_found_and_the_rest_read(how):
    doc, ids = recorded()
    slurm = RecordedSlurm("24.11", doc)
    bad = {ids[0], ids[-1]}  # one in each half
    slurm.poison, slurm.poison_how = bad, how
    read = reader(slurm).read(ids, False, [])
    assert sorted(read.unparsed) == sorted(bad)
    assert {r.job_id for r in read.records} | {r.het_job_id for r in read.records} >= \
        set(ids) - bad
    assert all(f"job {i}: its record breaks every answer" in " ".join(read.errors)
               for i in bad)
    assert slurm.calls["sacct"] <= 1 + 2 * 2 * 4  # halves, not a call per id


def test_sacct_that_fails_whatever_it_is_asked_is_raised_after_the_quarters():
    doc, ids = recorded()
    slurm = RecordedSlurm("24.11", doc, json_text="sacct: error: garbage\n")
    with pytest.raises(SlurmParseError, match="output is not JSON"):
        reader(slurm).read(ids, False, [])
    assert slurm.calls["sacct"] == 1 + 2 + 4


def test_slurmdbd_away_is_raised_after_the_halves():
    doc, ids = recorded()
    slurm = RecordedSlurm("24.11", doc)
    slurm.sacct_down = True
    with pytest.raises(TransientSlurmError):
        reader(slurm).read(ids, False, [])
    assert slurm.calls["sacct"] == 3
