"""The pipeline benchmark's stand-in for Slurm answers the listing in the product's format
(it once kept an old five-field layout, and every line was skipped as unreadable)."""

from ccadapter.slurm.formats.listing import parse_listing
from ccadapter.slurm.formats.records import ParseContext
from tests.bench.replay_slurm import listing_lines
from tests.conftest import fixture_json


def test_the_replayed_listing_is_read_whole():
    doc = fixture_json("24.11", "testbed/sacct-window.json")
    stamps, errors = parse_listing(listing_lines(doc), ParseContext("24.11.5", "sacct -P"))
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
    stamps, errors = parse_listing(listing_lines(doc), ParseContext("24.11.5", "sacct -P"))
    assert errors == [] and len({s.job_id for s in stamps}) == 300
    assert all(not (r.get("het") or {}).get("job_id") for r in doc["jobs"])


def test_the_daemons_listings_hand_out_the_backlog_and_nothing_runs(tmp_path):
    """What a poll asks today (ended runs, slurmctld's steps; ``backfill``: runs that ran)
    is answered: the benchmark once waited an hour on a daemon whose every window failed
    with 'no answer for squeue ...' and whose ended-runs listing was always empty."""
    import json
    import time

    import pytest

    from ccadapter.slurm.formats.listing import ENDED, RAN, STEP_FIELDS
    from tests.bench.delivery import CHUNK_JOBS, write_backlog
    from tests.bench.replay_slurm import answer

    write_backlog(tmp_path, CHUNK_JOBS + 10, time.time())
    ctx = ParseContext("24.11.5", "sacct -P")
    since = ["--starttime", "2026-11-25T00:00:00", "--endtime", "now"]
    first, code = answer(tmp_path, ["sacct", "-X", "-P", *ENDED, *since], "")
    assert code == 0 and len(parse_listing(first, ctx)[0]) == CHUNK_JOBS
    second, _ = answer(tmp_path, ["sacct", "-X", "-P", *RAN, *since], "")
    assert len(parse_listing(second, ctx)[0]) == 10
    assert answer(tmp_path, ["sacct", "-X", "-P", *ENDED, *since], "") == ("", 0)
    assert answer(tmp_path, ["squeue", "--all", "-h", "-s", "-O", STEP_FIELDS], "") == ("", 0)
    ids = sorted(s.job_id for s in parse_listing(second, ctx)[0])
    details, _ = answer(tmp_path, ["sacct", "--json", "-X", "--jobs", str(ids[0])], "")
    assert [r["job_id"] for r in json.loads(details)["jobs"]] == ids[:1]
    with pytest.raises(SystemExit, match=r"replay_slurm: no answer for sacct .* -s PENDING"):
        answer(tmp_path, ["sacct", "-X", "-P", "-s", "PENDING", *since], "")


def test_a_long_lived_scontrol_is_answered_question_by_question(tmp_path):
    """The daemon asks slurmctld through one long-lived ``scontrol -d`` whose input stays
    open (SlurmRunner.ask): the replayed one answers each question as it reads it (it once
    read to the end of its input first, and every question timed out after 60 s)."""
    import sys
    import time

    from ccadapter.slurm.formats.listing import ENDED
    from ccadapter.slurm.formats.scontrol import Batch, show_job
    from ccadapter.slurm.runner import SlurmRunner
    from tests.bench.delivery import write_backlog
    from tests.bench.replay_slurm import answer

    write_backlog(tmp_path, 20, time.time())
    listing, _ = answer(tmp_path, ["sacct", "-X", "-P", *ENDED, "--starttime", "0"], "")
    ids = sorted(s.job_id for s in parse_listing(listing, ParseContext("24.11.5", "-P"))[0])
    runner = SlurmRunner([sys.executable, "-m", "tests.bench.replay_slurm", str(tmp_path)],
                         timeout=20)
    try:
        for job_id in ids[:3]:  # one process, three questions
            batch = Batch.of([show_job(job_id)])
            started = time.monotonic()
            done = runner.ask(["scontrol", "-d"], batch.stdin(), batch.complete)
            assert time.monotonic() - started < 10
            assert batch.answers(done.stdout)[0].startswith(f"JobId={job_id} ")
    finally:
        runner.close()


def test_questions_by_job_id_are_answered_as_the_recorded_slurm_answers_them(tmp_path):
    """The replay answers a question by job id from its per-line files, without decoding a
    chunk (its cost would count as the daemon's enqueue): the same text as
    tests.fakeslurm.RecordedSlurm prints over the decoded chunks."""
    import time

    from ccadapter.slurm.formats.listing import ENDED
    from tests.bench.delivery import CHUNK_JOBS, FIRST_ID, write_backlog
    from tests.bench.replay_slurm import _served, answer
    from tests.fakeslurm import RecordedSlurm

    write_backlog(tmp_path, CHUNK_JOBS + 40, time.time())
    for _ in range(2):  # both chunks handed out
        answer(tmp_path, ["sacct", "-X", "-P", *ENDED, "--starttime", "0"], "")
    ids = [FIRST_ID + 3, FIRST_ID + 7, FIRST_ID + CHUNK_JOBS + 5, FIRST_ID + CHUNK_JOBS + 39,
           FIRST_ID + CHUNK_JOBS + 40, 17]  # the last two: no such job
    asked = ",".join(map(str, ids))
    doc, controller = _served(tmp_path, set(ids))
    recorded = RecordedSlurm("24.11", doc, controller, clock=time.time)
    for argv, env in ((["sacct", "--json", "-X", "--jobs", asked], None),
                      (["sacct", "-X", "-P", "-n", "--jobs", asked],
                       {"SLURM_TIME_FORMAT": "%s"})):
        assert answer(tmp_path, argv, "") == (recorded.run(argv, env=env), 0)
