"""sdiag as every release prints it (tests/testbed/record_sdiag.py: three jobs held, one
running): the job counts the fast path reads before it would dump every job."""

import pytest

from ccadapter.errors import SlurmParseError
from ccadapter.slurm.formats.sdiag import parse_sdiag
from tests.conftest import fixture_text

VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_release_counts_its_jobs(version):
    load = parse_sdiag(fixture_text(version, "sdiag.txt"), version)
    assert (load.pending, load.running, load.jobs) == (3, 1, 4)
    assert load.threads >= 1 and load.agent_queue >= 0
    assert load.counted_at > 1_700_000_000


def test_an_answer_without_job_counts_names_the_release():
    with pytest.raises(SlurmParseError, match=r"Slurm 24.11, `sdiag`: no 'Jobs pending'"):
        parse_sdiag("sdiag: error: Access/permission denied\n", "24.11")
