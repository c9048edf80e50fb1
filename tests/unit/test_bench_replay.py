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


def test_every_job_of_the_backlog_is_a_run_of_its_own(tmp_path):
    """The backlog's copies of recorded runs are listed one run each (a copied het job's
    component would be merged into its leader, and the benchmark would wait for ever)."""
    import json
    import time

    from tests.bench.delivery import write_backlog

    write_backlog(tmp_path, 300, time.time())
    doc = json.loads((tmp_path / "window-000.json").read_text())
    stamps, errors = parse_listing(_listing(doc), ParseContext("24.11.5", "sacct -P"))
    assert errors == [] and len({s.job_id for s in stamps}) == 300
    assert all(not (r.get("het") or {}).get("job_id") for r in doc["jobs"])
