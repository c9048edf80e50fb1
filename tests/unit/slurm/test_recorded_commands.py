"""The collector over the commands it ran on the real test bed, replayed exactly.

``tests/fixtures/<version>/testbed/commands-{busy,final}.json`` hold every command the
collector ran while the workload mix ran and after it ended (recorded by
``python -m tests.testbed.record_fixtures``): the run listings, ``sacct --json -j``, the
scontrol process answering many commands, the filtered dump, ``scontrol -o show node``. So
every text form the product parses is read here as Slurm wrote it, on every version.
"""

from dataclasses import replace
from zoneinfo import ZoneInfo

import pytest

from ccadapter.slurm.collector import Collector, CollectorSettings, RouteCosts
from ccadapter.slurm.formats.listing import parse_listing
from ccadapter.slurm.formats.records import ParseContext
from tests.conftest import VERSIONS, fixture_json
from tests.recorded import Replay

UTC = ZoneInfo("UTC")  # the recordings were made on machines running in UTC
SCENARIOS = ("busy", "final")


def replay(version, scenario, **kw):
    recording = fixture_json(version, f"testbed/commands-{scenario}.json")
    assert recording["tz"] == "UTC"
    runner = Replay(recording)
    collector = Collector(runner, CollectorSettings(), clock=lambda: recording["now"], tz=UTC,
                          **kw)
    return recording, runner, collector


@pytest.fixture(params=[(v, s) for v in VERSIONS for s in SCENARIOS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def scenario(request):
    return request.param


@pytest.fixture
def recorded(scenario):
    return replay(*scenario)


def test_the_window_as_jobs_reads_it(recorded):
    recording, runner, collector = recorded
    result = collector.window(recording["since"])
    assert result.errors == []
    jobs = {j.job_id: j for j in result.jobs}
    ids = recording["ids"]
    for name, job_ids in ids.items():
        if name == "hetjob":  # one job under the leader's id (test_hetjob.py)
            job_ids = job_ids[:1]
        for job_id in job_ids:
            if name != "cancelpend":  # never eligible: in no window
                assert job_id in jobs, (name, job_id)
    assert all(j.cluster == recording["cluster"] for j in result.jobs)
    started = [j for j in result.jobs if j.started and j.allocation_known]
    assert started and all(j.job_script.startswith("#!/bin/sh") for j in started)
    assert runner.calls["sacct"] == 2 and runner.calls["scontrol"] <= 1


def dump_always() -> RouteCosts:
    """A dump at the first question, slurmctld holding few jobs (no sdiag recorded)."""
    return RouteCosts(min_dump=1, first_dump=1, held_jobs=lambda: 10)


def test_questions_about_jobs_are_local(scenario, recorded):
    """Every scontrol question about jobs carries ``--local``: without it scontrol first asks
    slurmctld about a federation, one more request per job (``controller.jobs_scope``;
    squeue's step list: test_reconcilers)."""
    recording, runner, collector = recorded
    ids = sorted(i for v in recording["ids"].values() for i in v)
    collector.window(recording["since"])
    collector.controller_jobs([*ids, 999_999], scripts_for=ids)
    collector.nodes()
    _, dumping, dumper = replay(*scenario, costs=dump_always())
    dumper.controller_jobs(ids)
    argvs = [*runner.argvs, *dumping.argvs]
    about_jobs = [a for a in argvs if a[0] == "scontrol" and "-d" in a]
    assert any(a[-1] == "-d" for a in about_jobs) and any(a[-1] == "job" for a in about_jobs)
    assert all("--local" in a for a in about_jobs), about_jobs
    assert all("--local" not in a for a in argvs if a[0] == "sacct" or "node" in a)


def test_listings_are_read_without_error(recorded):
    recording, runner, _ = recorded
    ctx = ParseContext(recording["version"], "sacct -P")
    listings = [e for e in runner.answers("sacct") if "-P" in e["argv"]]
    # the window (twice: with and without pending jobs), the workload's ids, the het job's
    assert len(listings) == 4 and all(e["env"] == {"SLURM_TIME_FORMAT": "%s"} for e in listings)
    for entry in listings:
        stamps, errors = parse_listing(entry["stdout"], ctx)
        assert errors == [] and stamps
        assert all(s.start_time > 1e9 for s in stamps if s.started)


def test_ran_only_listing_leaves_out_what_never_ran(recorded):
    recording, _, collector = recorded
    every = collector.stamps(recording["since"], asked=())
    ran = collector.stamps(recording["since"])
    started = {s.run for s in ran.stamps if s.started}
    assert started == {s.run for s in every.stamps if s.started}
    # slurmdbd may give a job cancelled while pending a start time equal to its end (seen on
    # several versions, depending on the moment of the scancel), so -s RUNNING lists it; it
    # lists no nodes, and nothing is read or sent for it
    never = recording["ids"].get("cancelqueued", []) + recording["ids"]["cancelpend"]
    assert all(not s.started for s in ran.stamps if s.job_id in never)
    assert {s.job_id for s in ran.stamps if not s.started} <= set(never)


def test_fast_path_one_process_and_the_dump_agree(scenario, recorded):
    recording, _, collector = recorded
    ids = sorted(i for v in recording["ids"].values() for i in v)
    jobs, missing = collector.controller_jobs([*ids, 999_999], scripts_for=ids)
    assert 999_999 in missing
    started = [j for j in jobs if j.started]
    assert started and all(j.job_script.startswith("#!/bin/sh") for j in started)
    _, _, dumping = replay(*scenario, costs=dump_always())
    dumped, _ = dumping.controller_jobs(ids)
    # the same records, whichever way they were read (the dump route asked no scripts)
    assert {j.job_id: replace(j, job_script="") for j in jobs} == {j.job_id: j for j in dumped}


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_indices_while_running(version):
    recording, _, collector = replay(version, "busy")
    ids = sorted(i for v in recording["ids"].values() for i in v)
    jobs, _ = collector.controller_jobs([*ids, 999_999], scripts_for=ids)
    job = next(j for j in jobs if j.job_id == recording["ids"]["gpujob"][0])
    assert job.started and len(job.resources[0].accelerators) == 1


def test_nodes(recorded):
    _, _, collector = recorded
    nodes = collector.nodes()
    assert len(nodes) == 2 and all(n.states for n in nodes)
    # the layout the starts' CPU ids are mapped with (ccadapter.numbering): slurm.conf's
    assert {(n.sockets, n.cores_per_socket, n.threads_per_core, n.cpus) for n in nodes} == {
        (2, 2, 1, 4)}
