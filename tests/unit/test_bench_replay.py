"""The pipeline benchmark's stand-in for Slurm answers the listing in the product's format
(it once kept an old five-field layout, and every line was skipped as unreadable)."""

from ccadapter.slurm.formats.listing import parse_listing
from ccadapter.slurm.formats.records import ParseContext
from tests.bench.replay_slurm import _listing
from tests.conftest import fixture_json


def test_the_replayed_listing_is_read_whole():
    doc = fixture_json("24.11", "testbed/sacct-window.json")
    stamps, errors = parse_listing(_listing(doc), ParseContext("24.11.5", "sacct -P"))
    assert errors == []
    assert sorted(s.job_id for s in stamps) == sorted(r["job_id"] for r in doc["jobs"])
