"""The collector over the workload recorded from the test bed (tests/testbed/record_fixtures):
sacct after all jobs ended, slurmctld's view while most of them ran."""

import json
from zoneinfo import ZoneInfo

import pytest

from ccadapter.model import Shared
from ccadapter.slurm.collector import Collector
from tests.conftest import FIXTURES, collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm

pytestmark = pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])


def collect(version, controller="final"):
    base = "testbed/"
    window = fixture_json(version, base + "sacct-window.json")
    stored = FIXTURES / version / base / "sacct-scripts.json"
    scripts = {r["job_id"]: r["script"] for r in json.loads(stored.read_text())["jobs"]
               if r.get("script")} if stored.exists() else {}
    meta = fixture_json(version, base + "workload.json")
    # Recorded on a machine running in UTC; the clock is the end of the recording.
    now = meta["since"] + 600
    held = fixture_text(version, base + f"scontrol-d-{controller}.txt")
    slurm = RecordedSlurm(version, window, held, scripts=scripts, clock=lambda: now)
    collector = Collector(slurm, collector_settings(), clock=lambda: now, tz=ZoneInfo("UTC"))
    return collector.window(meta["since"]), meta, slurm


def test_recorded_workload(version):
    result, meta, runner = collect(version)
    assert result.errors == []
    jobs = {j.job_id: j for j in result.jobs}
    one = {n: jobs[ids[0]] for n, ids in meta["ids"].items() if n != "cancelpend"}
    assert meta["ids"]["cancelpend"][0] not in jobs  # never eligible
    assert one["complete"].state == "COMPLETED" and one["fail"].state == "FAILED"
    assert one["timeout"].state == "TIMEOUT" and one["cancelrun"].state == "CANCELLED"
    assert not one["cancelqueued"].started and one["cancelrun"].started
    gpu = one["gpujob"]
    assert gpu.num_acc == 1 and gpu.resources[0].accelerators == ()  # gone at the job's end
    assert one["excl"].shared is Shared.NONE and one["excl"].resources[0].hwthreads == (0, 1, 2, 3)
    assert sorted(jobs[i].array_task_id for i in meta["ids"]["arr"]) == [1, 2, 3]
    multi = one["multinode"]
    assert sum(len(r.hwthreads) for r in multi.resources) == 4 and len(multi.resources) == 2
    for job in result.jobs:
        assert job.cluster == meta["cluster"]
        if job.started and job.allocation_known:
            assert job.job_script.startswith("#!/bin/sh")
            assert len(job.resources) == job.num_nodes
    # the listing and one detail read; scripts from slurmdbd in that read (24.11+) or from
    # slurmctld in the one scontrol process (22.05, whose sacct --json carries none)
    assert runner.calls["sacct"] == 2 and len(runner.stdins) == 1
    if version != "22.05":
        assert "write batch_script" not in runner.stdins[0]
        assert "sleep" in gpu.job_script


def test_recorded_gpu_while_running(version):
    result, meta, _ = collect(version, controller="busy")
    gpu = {j.job_id: j for j in result.jobs}[meta["ids"]["gpujob"][0]]
    assert gpu.allocation_known and len(gpu.resources[0].accelerators) == 1
    assert gpu.resources[0].accelerators[0] in ("0", "1")


def test_recorded_squeue_has_the_generation_layout(version):
    """The JSON allocation layout differs per generation (documented in the format modules);
    the collector reads the scontrol text instead, which these recordings cross-check."""
    doc = json.loads(fixture_text(version, "testbed/squeue-busy.json"))
    resources = [j["job_resources"] for j in doc["jobs"] if j.get("job_resources")]
    assert resources
    if version == "22.05":
        assert all("allocated_nodes" in r for r in resources)
    else:
        assert all("allocation" in r["nodes"] for r in resources)
