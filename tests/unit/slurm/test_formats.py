"""Parsers over recorded real outputs of every supported Slurm version."""

import copy
import json
import re

import pytest

from ccadapter.errors import SlurmParseError, UnsupportedSlurmVersion
from ccadapter.model import Shared
from ccadapter.slurm.formats import SlurmFormat, format_for, newer_than_verified
from ccadapter.slurm.formats.records import ParseContext, SlurmVersion
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.text import (
    parse_energy_plugin,
    parse_node_boot,
    version_from_meta,
    version_from_text,
)
from ccadapter.slurm.formats.values import gpu_indices, int_ranges
from tests.conftest import VERSIONS, WORKLOAD_IDS, fixture_json, fixture_text, recorded_config
from tests.energy import UNSET, with_energy


def parse_window(version):
    doc = fixture_json(version, "sacct-window.json")
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    ctx = ParseContext(str(ver), "sacct --json")
    return {r["job_id"]: parser.parse_sacct_job(r, ctx) for r in doc["jobs"]}, ver


def test_version_detected_from_meta(version):
    _, ver = parse_window(version)
    assert f"{ver.major}.{ver.minor:02d}" == version


def test_workload_fields(version):
    recs, _ = parse_window(version)
    ids = WORKLOAD_IDS[version]
    assert recs[ids["complete"]].state == "COMPLETED"
    assert recs[ids["complete"]].num_hwthreads == 2
    assert recs[ids["fail"]].state == "FAILED"
    assert recs[ids["timeout"]].state == "TIMEOUT"
    assert recs[ids["timeout"]].time_limit == 60
    multi = recs[ids["multinode"]]
    assert len(multi.nodes) == 2 and multi.num_nodes == 2 and multi.num_hwthreads == 4
    assert recs[ids["excl"]].num_hwthreads == 4  # a whole node, though one CPU was asked for
    assert recs[ids["gpujob"]].partition == "gpu"
    cancelled = recs[ids["cancelled_pending"]]
    assert cancelled.state == "CANCELLED" and cancelled.nodes == ()
    # slurmdbd writes a job cancelled while pending with no start, or (by the moment of the
    # scancel, seen on 22.05, 23.02 and 24.05) with its end time as its start; read as Slurm
    # wrote it, and never started either way: it has no nodes
    assert cancelled.start_time in (0, cancelled.end_time)
    for rec in recs.values():
        assert rec.submit_time > 1_700_000_000
        assert rec.user == "root"
        if rec.start_time:
            assert rec.end_time >= rec.start_time


def test_array_tasks(version):
    recs, _ = parse_window(version)
    tasks = sorted((r.array_task_id, r.job_id) for r in recs.values() if r.array_job_id)
    assert [t for t, _ in tasks] == [1, 2, 3]
    array_ids = {r.array_job_id for r in recs.values() if r.array_job_id}
    assert len(array_ids) == 1
    # The array's own id is the record of its last task.
    assert array_ids.pop() in [j for _, j in tasks]


def test_gpu_tres_only_when_accounted(version):
    recs, _ = parse_window(version)
    gpu = recs[WORKLOAD_IDS[version]["gpujob"]]
    # AccountingStorageTRES=gres/gpu was set on the 24.11 and 26.05 recordings only.
    assert gpu.num_gpus == (None if version == "22.05" else 1)


def test_sharing_known_from_sacct_only_on_26_05(version):
    recs, _ = parse_window(version)
    excl = recs[WORKLOAD_IDS[version]["excl"]]
    plain = recs[WORKLOAD_IDS[version]["complete"]]
    if version == "26.05":
        assert (excl.shared, plain.shared) == (Shared.NONE, Shared.MULTI_USER)
    else:
        assert excl.shared is None and plain.shared is None


def test_recorded_records_carry_unset_energy(version):
    """The test bed gathers no energy: every real record has the energy TRES, unset (null on
    22.05, -2 on 24.11+), and it reads as no energy."""
    doc = fixture_json(version, "sacct-window.json")
    counts = {t["count"] for r in doc["jobs"] for t in r["tres"]["allocated"]
              if t["type"] == "energy"}
    assert counts == {UNSET[version]}
    recs, _ = parse_window(version)
    assert {r.energy for r in recs.values()} == {None}


def parse_doc(doc):
    ver = version_from_meta(doc, "sacct --json")
    ctx = ParseContext(str(ver), "sacct --json")
    return {r["job_id"]: format_for(ver, "sacct --json").parse_sacct_job(r, ctx)
            for r in doc["jobs"]}


def test_energy_is_read_from_the_job_record(version):
    """A recorded record given energy the way its version writes it (tests/energy.py:
    constructed, the test bed has no energy plugin). 0 reads as none: a plugin that
    measured nothing."""
    ids = WORKLOAD_IDS[version]
    doc = with_energy(fixture_json(version, "sacct-window.json"),
                      {ids["complete"]: 51234, ids["multinode"]: 9_000_000_000, ids["fail"]: 0})
    recs = parse_doc(doc)
    assert recs[ids["complete"]].energy == 51234
    assert recs[ids["multinode"]].energy == 9_000_000_000  # beyond 32 bits: int64 in Slurm
    assert recs[ids["fail"]].energy is None
    assert recs[ids["timeout"]].energy is None


def test_energy_from_the_detail_answer_without_steps(version):
    """What the collector reads: ``sacct --json -X`` as recorded on the test bed, whose
    records have no steps; the job record alone carries the energy."""
    recording = fixture_json(version, "testbed/commands-final.json")
    answer = next(e for e in recording["commands"] if "--json" in e["argv"])
    assert "-X" in answer["argv"]
    doc = json.loads(answer["stdout"])
    assert all(r["steps"] == [] for r in doc["jobs"])
    first = doc["jobs"][0]["job_id"]
    assert parse_doc(with_energy(doc, {first: 777}))[first].energy == 777


@pytest.mark.parametrize("count", ["51234", 1.5, True, {"set": True, "number": 5}])
def test_an_energy_count_of_another_type_is_an_error_naming_the_job(version, count):
    doc = fixture_json(version, "sacct-window.json")
    record = copy.deepcopy(doc["jobs"][0])
    (entry,) = [t for t in record["tres"]["allocated"] if t["type"] == "energy"]
    entry["count"] = count
    ver = version_from_meta(doc, "sacct --json")
    with pytest.raises(SlurmParseError, match=rf"Slurm {ver}, `sacct --json`: job "
                                              rf"{record['job_id']}: tres.allocated energy"):
        format_for(ver, "sacct --json").parse_sacct_job(record, ParseContext(str(ver),
                                                                             "sacct --json"))


def test_energy_plugin_from_show_config(version):
    config = recorded_config(version)
    assert "AcctGatherEnergyType" in config
    assert parse_energy_plugin(config) is None  # the test bed gathers none
    assert parse_energy_plugin(config.replace(
        config.split("AcctGatherEnergyType", 1)[1].split("\n", 1)[0],
        "    = acct_gather_energy/rapl")) == "acct_gather_energy/rapl"
    assert parse_energy_plugin("AcctGatherEnergyType    = acct_gather_energy/none\n") is None
    assert parse_energy_plugin("ClusterName = c\n") is None


def test_node_boot_settings_from_show_config(version):
    config = recorded_config(version)
    if version >= "26.05":  # PowerAction, which show config does not print: cannot tell
        assert parse_node_boot(config) is None
        return
    assert parse_node_boot(config) == ()  # the test bed boots no nodes: all "(null)"
    resume = config.replace(re.search(r"^ResumeProgram .*$", config, re.M)[0],
                            "ResumeProgram           = /usr/local/sbin/resume nodes")
    assert parse_node_boot(resume) == ("ResumeProgram",)
    knl = config.replace(re.search(r"^NodeFeaturesPlugins .*$", config, re.M)[0],
                         "NodeFeaturesPlugins     = node_features/helpers")
    assert parse_node_boot(knl) == ("NodeFeaturesPlugins",)
    # RebootProgram alone reboots nodes an admin names; they take no job until they are back
    reboot = config.replace(re.search(r"^RebootProgram .*$", config, re.M)[0],
                            "RebootProgram           = /sbin/reboot")
    assert parse_node_boot(reboot) == ()
    assert parse_node_boot("ClusterName = c\n") is None  # not a config: may boot


def test_reboot_flag_of_a_job(version):
    text = fixture_text(version, "testbed/scontrol-d-busy.txt")
    ctx = ParseContext(version, "scontrol show job -d")
    jobs, errors = parse_scontrol_jobs(text, ctx)
    assert not errors and jobs and not any(j.reboot for j in jobs.values())
    rebooted, _ = parse_scontrol_jobs(text.replace("Reboot=0", "Reboot=1"), ctx)
    assert all(j.reboot for j in rebooted.values())


@pytest.mark.parametrize("version", [SlurmVersion(21, 8, 8), SlurmVersion(24, 2, 0)])
def test_a_generation_older_than_verified_or_never_released_is_refused(version):
    with pytest.raises(UnsupportedSlurmVersion) as err:
        format_for(version, "sacct --json")
    assert str(version) in str(err.value) and "sacct --json" in str(err.value)


@pytest.mark.parametrize("version", [SlurmVersion(26, 11, 0), SlurmVersion(27, 5, 1)])
def test_a_release_newer_than_verified_is_read_as_the_newest(version):
    assert newer_than_verified(version)
    assert format_for(version, "sacct --json") is format_for(SlurmVersion(26, 5, 5), "x")


def test_every_generation_module_has_the_declared_shape():
    for version in VERSIONS:
        major, minor = map(int, version.split("."))
        assert not newer_than_verified(SlurmVersion(major, minor))
        assert isinstance(format_for(SlurmVersion(major, minor), "sacct --json"), SlurmFormat)


GENERATIONS = {"22.05": (22, 5), "24.11": (24, 11), "26.05": (26, 5)}


@pytest.mark.parametrize("parser_of", sorted(GENERATIONS))
@pytest.mark.parametrize("record_of", sorted(GENERATIONS))
def test_a_generation_rejects_the_records_of_another(parser_of, record_of):
    """Every record a generation's sacct wrote is refused by another generation's parser
    (with the version and command), never read on hope."""
    parser = format_for(SlurmVersion(*GENERATIONS[parser_of]), "sacct --json")
    ctx = ParseContext(parser_of, "sacct --json")
    records = fixture_json(record_of, "sacct-window.json")["jobs"]
    for record in records:
        if parser_of == record_of:
            assert parser.parse_sacct_job(record, ctx).job_id == record["job_id"]
        else:
            with pytest.raises(SlurmParseError, match=f"Slurm {parser_of}"):
                parser.parse_sacct_job(record, ctx)


def test_22_05_rejects_a_json_cluster_list():
    parser = format_for(SlurmVersion(22, 5), "sacctmgr list clusters")
    with pytest.raises(SlurmParseError, match="JSON"):
        parser.parse_cluster_list(fixture_text("24.11", "sacctmgr-clusters.json"),
                                  ParseContext("22.05", "sacctmgr list clusters"))
    with pytest.raises(SlurmParseError):
        format_for(SlurmVersion(24, 11), "sacctmgr").parse_cluster_list(
            fixture_text("22.05", "sacctmgr-clusters.txt"), ParseContext("24.11", "sacctmgr"))


def test_version_text():
    assert version_from_text("slurm-wlm 22.05.8\n", "sacct -V") == SlurmVersion(22, 5, 8)
    with pytest.raises(SlurmParseError):
        version_from_text("garbage", "sacct -V")
    with pytest.raises(SlurmParseError, match="meta"):
        version_from_meta({"jobs": []}, "sacct --json")


@pytest.mark.parametrize("mutate", [
    lambda r: r.pop("time"),
    lambda r: r["state"].update(current=7),
    lambda r: r.update(nodes="n[1-"),
    lambda r: r["tres"].update(allocated="cpu=1"),
    lambda r: r.update(user=None) or r.pop("user"),
    lambda r: r["array"].update(job_id="six"),
])
def test_bad_record_error_names_version_command_and_job(version, mutate):
    doc = fixture_json(version, "sacct-window.json")
    record = copy.deepcopy(doc["jobs"][0])
    mutate(record)
    ver = version_from_meta(doc, "sacct --json")
    with pytest.raises(SlurmParseError) as err:
        format_for(ver, "sacct --json").parse_sacct_job(record, ParseContext(str(ver), "sacct"))
    msg = str(err.value)
    assert str(ver) in msg
    assert f"job {record['job_id']}" in msg


# Found by tests/unit/fuzz/test_slurm_parsers_fuzz.py (shrunk: "required": null on 26.05),
# and the same shape for 22.05's exit_code: AttributeError escaped instead of an error
# naming the job, and the collector lost the whole window.
@pytest.mark.parametrize("mutate", [
    lambda r: r.update(required=None),
    lambda r: r.update(required=[4]),
    lambda r: r.update(exit_code=[0]),
    lambda r: r.update(exit_code="0"),
])
def test_non_object_parts_are_parse_errors(version, mutate):
    doc = fixture_json(version, "sacct-window.json")
    record = copy.deepcopy(doc["jobs"][0])
    mutate(record)
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    ctx = ParseContext(str(ver), "sacct --json")
    if record["required"] is None:  # null is "not said": the record still parses
        assert parser.parse_sacct_job(record, ctx).job_id == record["job_id"]
        return
    with pytest.raises(SlurmParseError, match=rf"Slurm {ver}, `sacct --json`: job \d+: "):
        parser.parse_sacct_job(record, ctx)


def test_unreadable_version_numbers_are_parse_errors():
    # float("inf") reaches int() when sacct prints 1e999 (json.loads reads it as inf)
    for major in (float("inf"), float("nan"), "²", None):
        doc = {"meta": {"slurm": {"version": {"major": major, "minor": "11"}}}}
        with pytest.raises(SlurmParseError, match="unreadable version"):
            version_from_meta(doc, "sacct --json")


def test_parsers_do_not_mutate_input(version):
    doc = fixture_json(version, "sacct-window.json")
    before = copy.deepcopy(doc)
    parse_window(version)
    ver = version_from_meta(doc, "x")
    for r in doc["jobs"]:
        format_for(ver, "x").parse_sacct_job(r, ParseContext(str(ver), "x"))
    assert doc == before


# --- scontrol show job -d text -------------------------------------------------------------

def test_scontrol_detail_lines(version):
    """The multi-node job (-N2 -n4) while it runs: one detail line per node, its CPUs split
    1 + 3 in every recording (the jobs before it hold the first node's other cores); the GPU
    job's index where it was recorded while running (22.05, and the source builds')."""
    multi_id, gpu_id = WORKLOAD_IDS[version]["multinode"], WORKLOAD_IDS[version]["gpujob"]
    jobs, errors = parse_scontrol_jobs(fixture_text(version, f"scontrol-d-{multi_id}.txt"),
                                       ParseContext(version, "scontrol"))
    assert errors == []
    multi = jobs[multi_id]
    assert len(multi.nodes) == 2 and sorted(len(n.cpu_ids) for n in multi.nodes) == [1, 3]
    assert multi.state == "RUNNING" and multi.batch
    assert multi.text.startswith(f"JobId={multi_id} ")
    gpu_text = fixture_text(version, f"scontrol-d-{gpu_id}.txt")
    if "GRES=gpu" in gpu_text:
        jobs, _ = parse_scontrol_jobs(gpu_text, ParseContext(version, "scontrol"))
        assert jobs[gpu_id].nodes[0].gpu_indices == (0,)


def test_scontrol_exclusive_22_05():
    jobs, _ = parse_scontrol_jobs(fixture_text("22.05", "scontrol-d-10.txt"),
                                  ParseContext("22.05", "scontrol"))
    assert jobs[10].shared is Shared.NONE
    assert jobs[10].nodes[0].cpu_ids == (0, 1, 2, 3)


def test_scontrol_many_records_and_compressed_hostlist():
    text = (
        "JobId=7 JobName=a\n   JobState=RUNNING Reason=None\n   BatchFlag=1\n"
        "   StartTime=2026-11-21T22:43:07 EndTime=Unknown\n"
        "     Nodes=n[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:1(IDX:0-1)\n"
        "   OverSubscribe=OK Contiguous=0\n\n"
        "JobId=8 JobName=b c\n   JobState=PENDING Reason=Resources\n   BatchFlag=0\n"
        "   OverSubscribe=USER\n\n"
        "garbage without id\n\n"
        "JobId=9 JobName=x\n     Nodes=n1 CPU_IDs=2-x Mem=0 GRES=\n\n"
    )
    jobs, errors = parse_scontrol_jobs(text, ParseContext("24.11.5", "scontrol show job -d"))
    assert [(n.hostname, n.cpu_ids, n.gpu_indices) for n in jobs[7].nodes] == [
        ("n1", (0, 1), (0, 1)), ("n2", (0, 1), (0, 1))]
    assert jobs[8].nodes == () and not jobs[8].batch and jobs[8].shared is Shared.SINGLE_USER
    assert 9 not in jobs
    assert len(errors) == 2 and "job 9" in errors[1] and "24.11.5" in errors[1]


@pytest.mark.parametrize("job_id", ["²", "١٢", "9" * 5000, "12345678901234567890"])
def test_ids_are_ascii_decimals(job_id):
    """str.isdigit() let these through to int(): "²" and 5,000 digits raised ValueError out
    of the parser (all jobs lost), "١٢" was read as job 12."""
    ctx = ParseContext("24.11.5", "scontrol show job -d")
    record = f"JobId={job_id} JobName=a\n   JobState=RUNNING ArrayTaskId=² ExitCode=١:0\n"
    jobs, errors = parse_scontrol_jobs(record + "\nJobId=8 JobName=b\n   JobState=PENDING", ctx)
    assert list(jobs) == [8] and len(errors) == 1 and "record without JobId" in errors[0]
    jobs, _ = parse_scontrol_jobs("JobId=7 JobName=a\n   ArrayTaskId=² ExitCode=١:0", ctx)
    assert (jobs[7].array_task_id, jobs[7].exit_code) == (None, None)


def test_scontrol_error_is_not_prefixed_twice():
    ctx = ParseContext("24.11.5", "scontrol show job -d")
    _, errors = parse_scontrol_jobs("JobId=9 JobName=x\n     Nodes=n[1- CPU_IDs=0 Mem=0 GRES=",
                                    ctx)
    assert errors == ["Slurm 24.11.5, `scontrol show job -d`: job 9: bad hostlist 'n[1-': "
                      "unbalanced brackets"]


@pytest.mark.parametrize(("gres", "expected"), [
    ("gpu:tesla:1(IDX:0)", (0,)),
    ("gpu:1(IDX:0-1)", (0, 1)),
    ("gpu:a100:3(IDX:0,2-3)", (0, 2, 3)),
    ("gpu:a:1(IDX:0),gpu:b:1(IDX:3)", (0, 3)),
    ("gpu:tesla:0(IDX:N/A)", ()),
    ("mps:100(IDX:0),gpu:1(IDX:1)", (1,)),
    ("", ()),
])
def test_gres_with_and_without_type(gres, expected):
    assert gpu_indices(gres) == expected


def test_int_ranges():
    assert int_ranges("0-2,5") == (0, 1, 2, 5)
    with pytest.raises(ValueError):
        int_ranges("3-1")


def test_a_requeued_run_reads_as_requeued_and_ended(version):
    """Issue 35, item 6: a job requeued while it ran (`scontrol requeue`). From 23.11 on the
    first run's record is ["PENDING", "REQUEUED"], read as PENDING: a run that never ran, so
    it was never stopped and stayed running in cc-backend."""
    from ccadapter.model import JobState, base_state, cc_state, ended

    doc = fixture_json(version, "sacct-requeued.json")
    ver = version_from_meta(doc, "sacct --json")
    parser = format_for(ver, "sacct --json")
    first, second = sorted((parser.parse_sacct_job(r, ParseContext(str(ver), "sacct --json"))
                            for r in doc["jobs"]), key=lambda r: r.start_time)
    assert first.job_id == second.job_id and first.start_time < second.start_time
    assert base_state(first.state) == "REQUEUED" and ended(first.state, first.end_time)
    assert cc_state(first.state) is JobState.PREEMPTED
    assert second.state == "COMPLETED"
