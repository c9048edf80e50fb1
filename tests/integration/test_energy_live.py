"""Consumed energy (issue 14, item 5) into the real cc-backend 1.5.4.

The test bed gathers no energy (``AcctGatherEnergyType`` unset), so Slurm is the recorded
24.11 cluster, its complete and fail jobs given joules (tests/energy.py: the real records with
the one field an energy plugin fills), replayed in process (tests/fakeslurm.py) as the unit
tests of the commands do. cc-backend is real: ``sync --once`` sends each run's start and stop,
then ``PATCH /api/jobs/edit_meta/`` with ``energy``. cc-backend archives a stopped job in the
background and answers that edit 500 until the job's meta.json exists (it stored the value
before: repository/job.go UpdateMetadata, then pkg/archive UpdateMetadata); ccadapter retries
such an answer with the outbox's backoff. What it holds is read back with ``GET
/api/jobs/{id}`` (each job's own record) and ``GET /api/jobs/`` with metaData.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from ccadapter.cli import Deps, main
from ccadapter.runtime.lastrun import LastRun
from tests.ccbackend import EDIT_META, CcBackend, Nodes
from tests.conftest import fixture_json, fixture_text
from tests.energy import with_energy
from tests.fakeslurm import RecordedSlurm

pytestmark = pytest.mark.integration

CLUSTER = "cluster24"  # the recorded cluster: nodes m1 (two GPUs) and m2
RECORDING = "24.11"


def test_energy_reaches_the_stopped_jobs_metadata(tmp_path):
    workload = fixture_json(RECORDING, "testbed/workload.json")
    joules = {workload["ids"]["complete"][0]: 51234, workload["ids"]["fail"][0]: 4321}
    slurm = RecordedSlurm(RECORDING, with_energy(
        fixture_json(RECORDING, "testbed/sacct-window.json"), joules),
        fixture_text(RECORDING, "testbed/scontrol-d-final.txt"))
    slurm.config = "AcctGatherEnergyType = acct_gather_energy/ipmi\n"
    with CcBackend(tmp_path / "cc-backend", {CLUSTER: Nodes(("m1", "m2"), ("m1",))}) as cc:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps({
            "ccRestUrl": cc.url, "ccRestJwt": cc.token,
            "pidFilePath": str(tmp_path / "run" / "daemon.pid"),
            "prepSockListenPath": str(tmp_path / "run" / "daemon.sock"),
            "lastRunPath": str(tmp_path / "lastrun"), "stateDirectory": str(tmp_path / "state"),
            "slurmFetchJobScripts": False}))
        LastRun(tmp_path / "lastrun").set(workload["since"] - 60)
        deps = Deps(runner=lambda config: slurm, sleep=lambda s: None)
        runs = []
        until = time.time() + 120
        while True:  # what waits (an edit cc-backend could not apply yet) goes next run
            res = CliRunner().invoke(main, ["--log-level", "info", "sync", "--once",
                                            "--config", str(cfg)], obj=deps)
            runs.append(res.exit_code)
            if res.exit_code == 0 or time.time() > until:
                break
            assert "event(s) wait in the outbox" in res.output, res.output
            time.sleep(2)
        assert res.exit_code == 0, (runs, res.output)
        cc.wait_committed()
        listed = {j["jobId"]: j for j in cc.jobs(CLUSTER)}
        own = {job: cc.job(listed[job]["id"]) for job in joules}
        edits = cc.requests(EDIT_META)
        print(f"\nsync --once runs: {runs}; edit_meta answers "
              f"{[(e.body['jobId'], e.status) for e in edits]}")
    for job, value in joules.items():
        assert own[job]["metaData"]["energy"] == str(value), own[job]
        assert listed[job]["metaData"]["energy"] == str(value)
        assert own[job]["jobState"] in ("completed", "failed")
        assert [e.status for e in edits if e.body["jobId"] == job][-1] == 200
    assert {j for j, v in listed.items() if "energy" in (v["metaData"] or {})} == set(joules)
    assert len({(e.body["jobId"], e.status) for e in edits if e.status == 200}) == len(joules)
