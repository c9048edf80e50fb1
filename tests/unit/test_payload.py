"""start_job/stop_job bodies, checked against cc-backend's schema and sanity rules."""

import json
from dataclasses import replace
from zoneinfo import ZoneInfo

import pytest

from ccadapter.cc.payload import NotSendable, energy_meta_body, start_job_body, stop_job_body
from ccadapter.model import Job, Shared, cc_state
from ccadapter.slurm.collector import Collector
from tests.conftest import FIXTURES, WORKLOAD_IDS, collector_settings, fixture_json
from tests.energy import with_energy
from tests.standin.ccbackend import JOB_META_REQUEST, decode_body
from tests.unit.slurm.test_collector import make_slurm

SCHEMA = json.loads((FIXTURES / "cc-backend-v1.5-swagger.json").read_text())["definitions"]
JOB_FIELDS = set(SCHEMA["schema.Job"]["properties"])
RESOURCE_FIELDS = set(SCHEMA["schema.Resource"]["properties"])
STATES = set(SCHEMA["schema.Job"]["properties"]["jobState"]["enum"]) | {"out_of_memory"}


def jobs(version):
    runner = make_slurm(version)
    return Collector(runner, collector_settings(), clock=lambda: 1795303300,
                     tz=ZoneInfo("UTC")).window(0).jobs


def test_start_bodies_pass_cc_backend_checks(version):
    started = [j for j in jobs(version) if j.started]
    assert len(started) >= 9
    for job in started:
        body = start_job_body(job)
        assert set(body) <= JOB_FIELDS, set(body) - JOB_FIELDS
        assert body["user"] and body["resources"] and body["numNodes"] >= 1
        assert len(body["resources"]) == body["numNodes"]
        assert body["numHwthreads"] >= 0 and body["numAcc"] >= 0
        assert body["jobState"] == "running"
        for res in body["resources"]:
            assert set(res) <= RESOURCE_FIELDS
        assert all(isinstance(v, str) for v in body["metaData"].values())
        assert body.get("walltime", 1) >= 1


def test_stop_bodies(version):
    for job in jobs(version):
        if not job.started:
            with pytest.raises(NotSendable):
                stop_job_body(job)
            continue
        body = stop_job_body(job)
        assert body["startTime"] == job.start_time
        assert body["stopTime"] >= body["startTime"]
        assert body["jobState"] in STATES


def test_golden_start_body_multinode_24_11():
    job = next(j for j in jobs("24.11") if j.job_id == WORKLOAD_IDS["24.11"]["multinode"])
    body = start_job_body(job)
    meta = body.pop("metaData")
    assert body == {
        "jobId": 3, "arrayJobId": 0, "user": "root", "project": "root", "cluster": "cluster24",
        "partition": "debug", "numNodes": 2, "numHwthreads": 4, "numAcc": 0,
        "shared": "multi_user", "jobState": "running", "startTime": 1795301534,
        "submitTime": 1795301533, "walltime": 600,
        "resources": [{"hostname": "m1", "hwthreads": [3]},
                      {"hostname": "m2", "hwthreads": [0, 1, 2]}],
    }
    assert meta["jobName"] == "multinode" and meta["submitTime"] == "1795301533"
    assert meta["slurmInfo"].startswith("JobId=3 JobName=multinode")
    assert "jobScript" in meta


def test_never_started_is_not_sendable():
    job = Job(job_id=1, cluster="c", partition="p", account="a", user="u", group="g", name="n",
              state="CANCELLED", submit_time=1, start_time=0, end_time=5, time_limit=0,
              num_nodes=0, num_hwthreads=1, num_acc=0, shared=Shared.MULTI_USER, resources=())
    with pytest.raises(NotSendable, match="never started"):
        start_job_body(job)


@pytest.mark.parametrize(("slurm", "cc"), [
    ("COMPLETING", "running"), ("RUNNING", "running"), ("CANCELLED by 0", "cancelled"),
    ("OUT_OF_MEMORY", "out_of_memory"), ("NODE_FAIL", "node_fail"), ("PENDING", None),
    ("TIMEOUT", "timeout"), ("DEADLINE", "deadline"), ("BOOT_FAIL", "boot_fail"),
])
def test_state_map(slurm, cc):
    got = cc_state(slurm)
    assert (got.value if got else None) == cc


def test_energy_meta_body_is_cc_backends_job_meta_request(version):
    """From records given energy as each version writes it (tests/energy.py: constructed,
    the test bed gathers none): a body edit_meta decodes strictly (job.go:503-510), naming
    the run, the value a string of joules; nothing for a run without energy or running."""
    ids = WORKLOAD_IDS[version]
    doc = with_energy(fixture_json(version, "sacct-window.json"), {ids["complete"]: 51234})
    collector = Collector(make_slurm(version, doc), collector_settings(ccRestUrl="http://cc"),
                          clock=lambda: 1795303300, tz=ZoneInfo("UTC"))
    found = {j.job_id: j for j in collector.window(0).jobs}
    job = found[ids["complete"]]
    body = energy_meta_body(job)
    assert body == {"jobId": job.job_id, "cluster": job.cluster, "startTime": job.start_time,
                    "payload": {"key": "energy", "value": "51234"}}
    decode_body(body, None, JOB_META_REQUEST)
    assert set(body) <= set(SCHEMA["api.JobMetaRequest"]["properties"])
    assert set(body["payload"]) <= set(SCHEMA["api.EditMetaRequest"]["properties"])
    assert energy_meta_body(found[ids["fail"]]) is None  # Slurm accounted none
    assert energy_meta_body(replace(job, state="RUNNING", end_time=0)) is None
