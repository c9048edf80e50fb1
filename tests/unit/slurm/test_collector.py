"""The collector over recorded outputs: joins, costs that follow what changed, isolation of
bad records."""

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from zoneinfo import ZoneInfo

import pytest

from ccadapter.config.keys import Config
from ccadapter.errors import SlurmParseError, TransientSlurmError
from ccadapter.model import Shared
from ccadapter.slurm.collector import IDS_PER_QUERY, Collector, CollectorSettings, RouteCosts
from ccadapter.slurm.formats.listing import ENDED
from tests.conftest import FIXTURES, WORKLOAD_IDS, ReplayRunner, collector_settings, fixture_json
from tests.energy import with_energy
from tests.fakeslurm import RecordedSlurm

UTC = ZoneInfo("UTC")  # the recordings were made on machines running in UTC
STORED = "#!/bin/sh\nstored in slurmdbd\n"


def controller_text(version):
    return "\n\n".join(p.read_text() for p in sorted((FIXTURES / version).glob("scontrol-d-*.txt")))


def newest(doc):
    return max(j["time"]["end"] for j in doc["jobs"]
               if isinstance(j, dict) and isinstance(j.get("time"), dict)
               and isinstance(j["time"]["end"], int))


def make_slurm(version, sacct_doc=None, **kw):
    doc = sacct_doc if sacct_doc is not None else fixture_json(version, "sacct-window.json")
    base = fixture_json(version, "sacct-window.json")
    # slurmdbd's stored script of the multi-node job (22.05's JSON carries no scripts)
    scripts = {} if version == "22.05" else {WORKLOAD_IDS[version]["multinode"]: STORED}
    kw.setdefault("listing", doc if sacct_doc is None else base)
    return RecordedSlurm(version, doc, controller_text(version), scripts=scripts,
                         controller_script=lambda i: f"#!/bin/sh\n# job {i} \"quoted\", \xe9\n",
                         clock=lambda: newest(base) + 60, **kw)


def collect(version, config=None, **kw):
    slurm = make_slurm(version, **kw)
    now = newest(fixture_json(version, "sacct-window.json")) + 60
    col = Collector(slurm, CollectorSettings.from_config(config or Config()),
                    clock=lambda: now, tz=UTC)
    return col.window(now - 3660), slurm


def test_window_costs_a_listing_a_detail_read_and_one_scontrol(version):
    result, slurm = collect(version)
    # the listing, then the JSON of the listed jobs (with -B: slurmdbd's scripts at once)
    assert slurm.calls["sacct"] == 2
    assert "-B" in slurm.argvs[1]
    # one scontrol process for the allocations and scripts of every held job
    assert slurm.calls["scontrol"] == 1 and len(slurm.stdins) == 1
    jobs = {j.job_id: j for j in result.jobs}
    if version != "22.05":  # slurmdbd stores scripts: none is asked of slurmctld
        multi = WORKLOAD_IDS[version]["multinode"]
        assert jobs[multi].job_script == STORED
        assert f"write batch_script {multi} -" not in slurm.stdins[0]
    held = {int(p.stem.rsplit("-", 1)[1]) for p in (FIXTURES / version).glob("scontrol-d-*.txt")}
    asked = {int(line.split()[2]) for line in slurm.stdins[0].splitlines()
             if line.startswith("show job")}
    assert {i for i in held if jobs[i].started} <= asked
    assert all(jobs[i].started for i in asked)  # never-started runs need no allocation
    assert result.errors == []


def test_allocation_joined_by_job_and_start_time(version):
    result, _ = collect(version)
    jobs = {j.job_id: j for j in result.jobs}
    multi = jobs[WORKLOAD_IDS[version]["multinode"]]
    assert multi.allocation_known
    assert [(r.hostname[1:], r.hwthreads) for r in multi.resources] == [("1", (3,)),
                                                                      ("2", (0, 1, 2))]
    assert multi.slurm_info.startswith(f"JobId={multi.job_id} ")
    assert "quoted" in multi.job_script or "slurmdbd" in multi.job_script
    plain = jobs[WORKLOAD_IDS[version]["complete"]]
    assert not plain.allocation_known and plain.resources[0].hwthreads == ()
    cancelled = jobs[WORKLOAD_IDS[version]["cancelled_pending"]]
    assert not cancelled.started and cancelled.resources == ()


def test_gpu_indices_and_pci_mapping():
    cfg = Config(gpuPciAddrs={"^x$": ["bad"], "^n[0-9]$": ["0000:01:00.0", "0000:02:00.0"],
                              "^n1$": ["never used: first match wins"]})
    result, _ = collect("22.05", config=cfg)
    gpu = {j.job_id: j for j in result.jobs}[5]
    assert gpu.resources[0].accelerators == ("0000:01:00.0",)
    assert gpu.num_acc == 1  # from the GRES index: 22.05 did not account gres/gpu
    result, _ = collect("22.05")
    assert {j.job_id: j for j in result.jobs}[5].resources[0].accelerators == ("0",)


def test_exclusive_from_controller_on_22_05():
    result, _ = collect("22.05")
    jobs = {j.job_id: j for j in result.jobs}
    assert jobs[10].shared is Shared.NONE
    assert jobs[10].resources[0].hwthreads == (0, 1, 2, 3)


def test_bad_record_fails_alone(version):
    doc = fixture_json(version, "sacct-window.json")
    whole, _ = collect(version, sacct_doc=copy.deepcopy(doc))
    broken = next(r for r in doc["jobs"] if r["job_id"] == WORKLOAD_IDS[version]["fail"])
    broken["time"] = "yesterday"
    doc["jobs"].append({"no": "job id"})
    result, _ = collect(version, sacct_doc=doc)
    assert len(result.jobs) == len(whole.jobs) - 1
    assert len(result.errors) == 2
    assert f"job {broken['job_id']}" in result.errors[0]
    assert result.unparsed == [broken["job_id"]]  # asked again later; the other names none


def test_requeued_runs_are_distinct(version):
    doc = fixture_json(version, "sacct-window.json")
    ids = WORKLOAD_IDS[version]
    first = next(j for j in doc["jobs"] if j["job_id"] == ids["multinode"])
    earlier = copy.deepcopy(first)
    earlier["time"]["start"] -= 100
    earlier["time"]["end"] = first["time"]["start"] - 50
    earlier["state"]["current"] = ("REQUEUED" if isinstance(first["state"]["current"], str)
                                   else ["REQUEUED"])
    doc["jobs"].append(earlier)
    result, _ = collect(version, sacct_doc=doc, listing=doc)
    runs = [j for j in result.jobs if j.job_id == ids["multinode"]]
    assert len(runs) == 2 and len({r.key for r in runs}) == 2
    old = next(r for r in runs if r.state == "REQUEUED")
    new = next(r for r in runs if r.state != "REQUEUED")
    assert new.allocation_known and not old.allocation_known
    assert old.cc_state.value == "preempted"


def test_not_json_names_version_and_command():
    with pytest.raises(SlurmParseError) as err:
        collect("24.11", json_text="sacct: error: something\n")
    assert "24.11.5" in str(err.value) and "sacct --json" in str(err.value)


@pytest.mark.parametrize("out", ['{"jobs": [{"job_id": ' + "9" * 4301 + "}]}",
                                 "[" * 5000 + "]" * 5000])
def test_undecodable_json_names_version_and_command(out):
    """Found in review while fuzzing: only JSONDecodeError was caught, so a 4,301-digit
    number (ValueError) or deep nesting (RecursionError) escaped the collector untyped."""
    with pytest.raises(SlurmParseError, match=r"Slurm 24\.11\.5, `sacct --json`: output is not"):
        collect("24.11", json_text=out)


def test_controller_unreachable_keeps_hostnames(version):
    slurm = make_slurm(version)
    slurm.controller_down = True
    now = newest(slurm.doc) + 60
    result = Collector(slurm, collector_settings(), clock=lambda: now, tz=UTC).window(0)
    assert any("allocation details unavailable" in e for e in result.errors)
    multi = {j.job_id: j for j in result.jobs}[WORKLOAD_IDS[version]["multinode"]]
    assert len(multi.resources) == 2 and not multi.allocation_known


def many_runs(n):
    doc = fixture_json("24.11", "sacct-window.json")
    base = [r for r in doc["jobs"] if r["nodes"] != "None assigned"]
    doc["jobs"] = []
    for i in range(n):
        rec = copy.deepcopy(base[i % len(base)])
        rec["job_id"] = 1000 + i
        doc["jobs"].append(rec)
    return doc


def test_details_are_read_in_bounded_batches():
    """10,000 runs built from real records: one listing, then the JSON of IDS_PER_QUERY ids
    at a time, each batch handed over before the next is asked (memory follows a batch)."""
    doc = many_runs(10_000)
    slurm = make_slurm("24.11", sacct_doc=doc, listing=doc)
    col = Collector(slurm, collector_settings(slurmFetchJobScripts=False),
                    clock=lambda: 4e9, tz=UTC)
    listing = col.stamps(0)
    assert len(listing.stamps) == 10_000 and slurm.calls["sacct"] == 1
    batches = col.iter_jobs([s.job_id for s in listing.stamps], starts=())
    first = next(batches)
    assert len(first.jobs) == IDS_PER_QUERY and slurm.calls["sacct"] == 2
    rest = sum(len(b.jobs) for b in batches)
    assert IDS_PER_QUERY + rest == 10_000
    assert slurm.calls["sacct"] == 1 + -(-10_000 // IDS_PER_QUERY)  # ceiling
    assert slurm.calls["scontrol"] == 0  # no start wanted: no allocation asked


def test_route_by_count_single_requests_or_a_filtered_dump():
    slurm = make_slurm("24.11")
    costs = RouteCosts(per_job=0.005, dump=None, min_dump=64, first_dump=500)
    col = Collector(slurm, collector_settings(), clock=lambda: 0, tz=UTC, costs=costs)
    held = held_ids("24.11")
    jobs, missing = col.controller_jobs(held)
    assert not missing and len(slurm.stdins) == 1  # one process (besides `show config`)
    # many jobs: one dump read line by line, the unwanted records skipped unread
    jobs, missing = col.controller_jobs(held + list(range(100_000, 100_600)))
    assert sorted(j.job_id for j in jobs) == sorted(held) and len(missing) == 600
    assert [a for a in slurm.argvs if a[-2:] == ["show", "job"]]
    assert costs.dump is not None  # measured: the next choice uses it
    costs.dump, costs.per_job = 10.0, 0.001
    assert not costs.prefer_dump(600)  # 0.6 s of single requests beat a 10 s dump
    assert costs.prefer_dump(20_000)


def test_no_dump_of_every_job_at_a_large_queue_whatever_it_would_save():
    """Issue 47: a dump packs every job under slurmctld's job read lock; with more than
    ``max_dump_jobs`` held (sdiag's count, read at most every 30 s) single requests are
    asked however many, and without a count (sdiag unreadable) too."""
    slurm = make_slurm("24.11")
    slurm.held_jobs = 5_000
    costs = RouteCosts(per_job=0.005, dump=0.01, min_dump=64, first_dump=500)
    col = Collector(slurm, collector_settings(), clock=lambda: 0, tz=UTC, costs=costs)
    held = held_ids("24.11")
    jobs, missing = col.controller_jobs(held + list(range(100_000, 100_600)))
    assert sorted(j.job_id for j in jobs) == sorted(held) and len(missing) == 600
    assert not [a for a in slurm.argvs if a[-2:] == ["show", "job"]]  # no dump
    assert not costs.prefer_dump(20_000)
    assert slurm.calls["sdiag"] == 1  # its count is kept, not asked per choice
    slurm.held_jobs = 1_000
    col.slurmctld._load = (-1e9, None)  # the reading is old: asked again
    assert costs.prefer_dump(20_000) and slurm.calls["sdiag"] == 2
    slurm.controller_down = True
    col.slurmctld._load = (-1e9, None)
    assert not costs.prefer_dump(20_000)


def held_ids(version):
    return [int(p.stem.rsplit("-", 1)[1]) for p in (FIXTURES / version).glob("scontrol-d-*.txt")]


def test_scripts_asked_beside_the_jobs_at_the_same_time():
    """The fast path's route: the batch scripts in a question of their own, asked of another
    scontrol while the jobs are asked (each waits for the other's, which it could not if
    they were asked in turn), and the jobs built as from one question."""
    slurm = make_slurm("24.11")
    col = Collector(slurm, collector_settings(), clock=lambda: 0, tz=UTC)
    held = held_ids("24.11")
    together = threading.Barrier(2, timeout=5)
    ask = slurm.ask

    def asking(argv, stdin, *args, **kwargs):
        together.wait()
        return ask(argv, stdin, *args, **kwargs)
    one, _ = col.controller_jobs(held, scripts_for=held)
    slurm.ask = asking
    with ThreadPoolExecutor(1) as beside:
        two, missing = col.controller_jobs(held, scripts_for=held, beside=beside)
    assert not missing and two == one and any(j.job_script for j in two)
    jobs_asked, scripts_asked = sorted(slurm.stdins[1:], key=lambda t: "batch_script" in t)
    assert "batch_script" not in jobs_asked and "show job" not in scripts_asked
    assert jobs_asked.count("show job") == scripts_asked.count("write batch_script") == len(held)


def test_scripts_beside_that_cannot_be_asked_fail_the_jobs_too():
    """A start is never built without the script it was asked with: if the scripts'
    question finds slurmctld gone, the jobs are left to the caller's retry (the poll)."""
    slurm = make_slurm("24.11")
    col = Collector(slurm, collector_settings(), clock=lambda: 0, tz=UTC)
    held = held_ids("24.11")
    ask = slurm.ask

    def no_scripts(argv, stdin, *args, **kwargs):
        if "batch_script" in stdin:
            raise TransientSlurmError(["scontrol"], "no answer within 60 s")
        return ask(argv, stdin, *args, **kwargs)
    slurm.ask = no_scripts
    with ThreadPoolExecutor(1) as beside, pytest.raises(TransientSlurmError, match="60 s"):
        col.controller_jobs(held, scripts_for=held, beside=beside)


def test_jobs_by_id_filters_array_siblings():
    slurm = make_slurm("24.11")
    result = Collector(slurm, collector_settings(), clock=lambda: 0, tz=UTC).jobs_by_id([10, 11])
    assert sorted(j.job_id for j in result.jobs) == [10, 11]
    assert "--jobs" in slurm.argvs[0] and "10,11" in slurm.argvs[0]


def test_bad_node_line_fails_alone(caplog):
    slurm = make_slurm("24.11", nodes="NodeName=m1 CPUAlloc=1 AllocMem=0 State=MIXED\n"
                                      "NodeName=m2 CPUAlloc=x AllocMem=0 State=IDLE\n")
    nodes = Collector(slurm, collector_settings(), tz=UTC).nodes()
    assert [n.hostname for n in nodes] == ["m1"]
    assert "node m2" in caplog.text


def test_starts_not_wanted_cost_no_controller(version):
    """Details read for a stop only (stale-jobs, cc-cache) never ask slurmctld."""
    slurm = make_slurm(version)
    now = newest(slurm.doc) + 60
    col = Collector(slurm, collector_settings(), clock=lambda: now, tz=UTC)
    ids = [r["job_id"] for r in slurm.doc["jobs"]]
    result = col.jobs_by_id(ids, starts=())
    assert result.jobs and slurm.calls["scontrol"] == 0 and "-B" not in slurm.argvs[-1]


def test_energy_is_kept_only_where_it_can_be_sent(version):
    """Energy goes to cc-backend over REST only: without ccRestUrl the collector drops it
    (tests/energy.py: records constructed from the recorded ones)."""
    ids = WORKLOAD_IDS[version]
    doc = with_energy(fixture_json(version, "sacct-window.json"), {ids["complete"]: 51234})
    kept, _ = collect(version, Config(ccRestUrl="http://cc"), sacct_doc=doc)
    assert {j.job_id: j.energy for j in kept.jobs if j.energy} == {ids["complete"]: 51234}
    dropped, _ = collect(version, Config(), sacct_doc=doc)
    assert all(j.energy is None for j in dropped.jobs)


@pytest.mark.parametrize(("line", "gathered"), [
    ("AcctGatherEnergyType    = acct_gather_energy/ipmi", True),
    ("AcctGatherEnergyType    = acct_gather_energy/none", False),
    ("AcctGatherEnergyType    = (null)", False),
])
def test_energy_gathering_is_read_with_the_cluster_name(line, gathered):
    runner = ReplayRunner(lambda argv: f"ClusterName             = c\n{line}\n")
    collector = Collector(runner, collector_settings())
    assert collector.cluster_name() == "c"
    assert collector.energy_accounted() is gathered
    assert runner.calls["scontrol"] == 1  # one `scontrol show config` for both


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_window_bounds_mean_the_same_instant_to_the_daemon_and_to_sacct(version):
    """Issue 35, item 9(a): the daemon (here in Tokyo) wrote bounds in its zone, sacct (run
    through slurmCommandPrefix in Los Angeles) read them in its own: the window moved by
    17 hours (here past now: sacct refuses it)."""
    now = newest(fixture_json(version, "sacct-window.json")) + 60

    def listed(daemon_zone, slurm_zone):
        col = Collector(make_slurm(version, zone=slurm_zone), CollectorSettings(),
                        clock=lambda: now, tz=daemon_zone)
        return {s.run for s in col.stamps(now - 3660, asked=ENDED).stamps}

    same = listed(UTC, UTC)
    assert same and listed(ZoneInfo("Asia/Tokyo"), ZoneInfo("America/Los_Angeles")) == same
    assert listed(ZoneInfo("America/Los_Angeles"), ZoneInfo("Asia/Tokyo")) == same
