"""The collector over recorded outputs: joins, costs, isolation of bad records."""

import copy
import json
from zoneinfo import ZoneInfo

import pytest

from ccadapter.config import Config
from ccadapter.errors import SlurmParseError
from ccadapter.model import Shared
from ccadapter.slurm.collector import Collector
from tests.conftest import FIXTURES, WORKLOAD_IDS, ReplayRunner, fixture_json

UTC = ZoneInfo("UTC")  # the recordings were made on machines running in UTC
RELEASE = {"22.05": "22.05.8", "24.11": "24.11.5", "26.05": "26.05.5"}


def controller_text(version):
    return "\n\n".join(p.read_text() for p in sorted((FIXTURES / version).glob("scontrol-d-*.txt")))


def make_runner(version, sacct_doc=None, scontrol=None):
    doc = sacct_doc if sacct_doc is not None else fixture_json(version, "sacct-window.json")

    def answer(argv):
        if argv[:2] == ["sacct", "-V"]:
            return f"slurm {RELEASE[version]}\n"
        if argv[0] == "sacct" and "-B" in argv:  # scripts slurmdbd stored: only job 3's
            stored = copy.deepcopy(doc)
            for rec in stored["jobs"]:
                if rec.get("job_id") == 3:
                    rec["script"] = "#!/bin/sh\nstored in slurmdbd\n"
            return json.dumps(stored)
        if argv[0] == "sacct":
            return doc if isinstance(doc, str) else json.dumps(doc)
        if argv[-3:] == ["show", "job", "-d"]:
            return scontrol if scontrol is not None else controller_text(version)
        if "batch_script" in argv:
            return f"#!/bin/sh\n# job {argv[-2]} \"quoted\", \xe9\n"
        raise AssertionError(argv)

    return ReplayRunner(answer)


def collect(version, config=None, **kw):
    runner = make_runner(version, **kw)
    doc = fixture_json(version, "sacct-window.json")
    newest = max(j["time"]["end"] for j in doc["jobs"] if isinstance(j["time"]["end"], int))
    col = Collector(runner, config or Config(), clock=lambda: newest + 60, tz=UTC)
    return col.window(newest - 3600), runner


def test_window_costs_fixed_calls_plus_scripts(version):
    result, runner = collect(version)
    # 24.11+: a second sacct (-B -j IDS) fetches every stored script at once.
    assert runner.calls["sacct"] == (1 if version == "22.05" else 2)
    shows = [a for a in runner.argvs if a[-3:] == ["show", "job", "-d"]]
    scripts = [a for a in runner.argvs if "batch_script" in a]
    assert len(shows) == 1
    jobs = {j.job_id: j for j in result.jobs}
    if version != "22.05":
        assert jobs[3].job_script == "#!/bin/sh\nstored in slurmdbd\n"
        assert "3" not in [a[-2] for a in scripts]
    # Scripts only for jobs slurmctld still holds (the recorded scontrol-d files).
    held = {int(p.stem.rsplit("-", 1)[1]) for p in (FIXTURES / version).glob("scontrol-d-*.txt")}
    assert {int(a[-2]) for a in scripts} <= held
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
    cancelled = jobs[WORKLOAD_IDS[version]["cancelrun"]]
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
    doc["jobs"][1]["time"] = "yesterday"
    doc["jobs"].append({"no": "job id"})
    result, _ = collect(version, sacct_doc=doc)
    assert len(result.jobs) == len(doc["jobs"]) - 2
    assert len(result.errors) == 2
    assert f"job {doc['jobs'][1]['job_id']}" in result.errors[0]


def test_requeued_runs_are_distinct(version):
    doc = fixture_json(version, "sacct-window.json")
    ids = WORKLOAD_IDS[version]
    first = next(j for j in doc["jobs"] if j["job_id"] == ids["multinode"])
    earlier = copy.deepcopy(first)
    earlier["time"]["start"] -= 100
    earlier["time"]["end"] = first["time"]["start"] - 50
    earlier["state"]["current"] = "REQUEUED" if version == "22.05" else ["REQUEUED"]
    doc["jobs"].append(earlier)
    result, _ = collect(version, sacct_doc=doc)
    runs = [j for j in result.jobs if j.job_id == ids["multinode"]]
    assert len(runs) == 2 and len({r.key for r in runs}) == 2
    old = next(r for r in runs if r.state == "REQUEUED")
    new = next(r for r in runs if r.state != "REQUEUED")
    assert new.allocation_known and not old.allocation_known
    assert old.cc_state.value == "preempted"


def test_not_json_names_version_and_command():
    with pytest.raises(SlurmParseError) as err:
        collect("24.11", sacct_doc="sacct: error: something\n")
    assert "24.11.5" in str(err.value) and "sacct --json" in str(err.value)


@pytest.mark.parametrize("out", ['{"jobs": [{"job_id": ' + "9" * 4301 + "}]}",
                                 "[" * 5000 + "]" * 5000])
def test_undecodable_json_names_version_and_command(out):
    """Found in review while fuzzing: only JSONDecodeError was caught, so a 4,301-digit
    number (ValueError) or deep nesting (RecursionError) escaped the collector untyped."""
    with pytest.raises(SlurmParseError, match=r"Slurm 24\.11\.5, `sacct --json`: output is not"):
        collect("24.11", sacct_doc=out)


def test_controller_unreachable_keeps_hostnames(version):
    from ccadapter.errors import SlurmCommandError

    runner = make_runner(version)
    inner = runner.answer

    def failing(argv):
        if argv[0] == "scontrol":
            raise SlurmCommandError(argv, "exit code 1", "Unable to contact slurm controller")
        return inner(argv)

    runner.answer = failing
    doc = fixture_json(version, "sacct-window.json")
    newest = max(j["time"]["end"] for j in doc["jobs"] if isinstance(j["time"]["end"], int))
    result = Collector(runner, Config(), clock=lambda: newest, tz=UTC).window(0)
    assert any("allocation details unavailable" in e for e in result.errors)
    multi = {j.job_id: j for j in result.jobs}[WORKLOAD_IDS[version]["multinode"]]
    assert len(multi.resources) == 2 and not multi.allocation_known


def test_calls_do_not_grow_with_jobs():
    """10,000 jobs built from real records cost the same two calls as ten."""
    doc = fixture_json("24.11", "sacct-window.json")
    base = doc["jobs"]
    doc["jobs"] = []
    for i in range(10_000):
        rec = copy.deepcopy(base[i % len(base)])
        rec["job_id"] = 1000 + i
        doc["jobs"].append(rec)
    cfg = Config(slurmFetchJobScripts=False)
    result, runner = collect("24.11", config=cfg, sacct_doc=doc)
    assert len(result.jobs) == 10_000
    assert sum(runner.calls.values()) == 2
    cfg = Config()
    result, runner = collect("24.11", config=cfg, sacct_doc=doc)
    assert runner.calls["sacct"] == 2  # scripts of all 10,000 in one more call


def test_jobs_by_id_filters_array_siblings():
    runner = make_runner("24.11")
    result = Collector(runner, Config(), clock=lambda: 0, tz=UTC).jobs_by_id([10, 11])
    assert sorted(j.job_id for j in result.jobs) == [10, 11]
    assert "--jobs" in runner.argvs[0] and "10,11" in runner.argvs[0]


def test_bad_squeue_node_list_fails_alone(caplog):
    """Found by fuzzing (shrunk: "97 RUNNING m["): one bad node list in squeue raised out
    of nodes(), so no node state was sent that cycle; and the error named no version."""
    def answer(argv):
        if argv[0] == "squeue":
            return "97 RUNNING m[\n98 RUNNING m1\n99 RUNNING m[1-2]\n"
        if argv[-2:] == ["show", "node"]:
            return "NodeName=m1 CPUAlloc=1 AllocMem=0 State=MIXED\n"
        raise AssertionError(argv)

    nodes, counts = Collector(ReplayRunner(answer), Config(), tz=UTC).nodes()
    assert [n.hostname for n in nodes] == ["m1"]
    assert counts == {"m1": 2, "m2": 1}
    assert "`squeue`: job 97: bad hostlist 'm['" in caplog.text


def test_scripts_of_known_runs_are_not_fetched_again(version):
    """The window re-reads its overlap every cycle: a run whose start is stored already
    needs no script (on 22.05 that was one scontrol call per job and cycle)."""
    first, runner = collect(version)
    fetched = [a for a in runner.argvs if "batch_script" in a or "-B" in a]
    assert fetched  # the recorded window has started jobs whose scripts are fetched
    runs = {(j.job_id, j.start_time) for j in first.jobs if j.started}
    runner = make_runner(version)
    doc = fixture_json(version, "sacct-window.json")
    newest = max(j["time"]["end"] for j in doc["jobs"] if isinstance(j["time"]["end"], int))
    col = Collector(runner, Config(), clock=lambda: newest + 60, tz=UTC)
    asked: list[list[tuple[int, int]]] = []

    def known(candidates):
        asked.append(candidates)
        return set(candidates) & runs
    again = col.window(newest - 3600, known=known)
    assert asked and not [a for a in runner.argvs if "batch_script" in a or "-B" in a]
    assert len(again.jobs) == len(first.jobs)
