"""Heterogeneous jobs over the test bed's recordings of every Slurm version: the workload's
``hetjob`` (``sbatch -n1 -p gpu --gres=gpu:tesla:1 : -n2 -p debug``) is one job on every
path -- the window (``ccadapter jobs``, backfill, slurm-window), the listing and detail read
by the leader's id (stale-jobs, cc-cache), the fast path told of every component or of one
alone -- and the hook's recorded messages say what slurmctld tells of each component.

Expected values are read here from the recorded text itself (sacct's JSON records, the
``Nodes=.. CPU_IDs=.. GRES=..`` lines of ``scontrol show job -d``), not through the product.
"""

import json
import re
import threading
import time

import hostlist
import pytest

from ccadapter.cc.payload import start_job_body
from ccadapter.outbox import Outbox
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import parse_message
from tests.conftest import VERSIONS, fixture_json, fixture_text
from tests.unit.slurm.test_recorded_commands import SCENARIOS, replay

CASES = [(v, s) for v in VERSIONS for s in SCENARIOS]


def _num(value):
    return value.get("number", 0) if isinstance(value, dict) else value or 0


def _text(value):
    return value[0] if isinstance(value, list) else value


def sacct_parts(version, ids):
    """The het job's components as slurmdbd recorded them after the end, by offset."""
    window = fixture_json(version, "testbed/sacct-window.json")
    parts = [r for r in window["jobs"] if r["job_id"] in ids]
    assert len(parts) == len(ids)
    return sorted(parts, key=lambda r: _num(r["het"]["job_offset"]))


def allocation(text, job_id):
    """{host: (cpu ids, gpu indices)} of one job's record in ``scontrol show job -d``."""
    record = next(r for r in re.split(r"\n\s*\n", text) if r.startswith(f"JobId={job_id} "))
    out = {}
    for nodes, cpus, gres in re.findall(r"Nodes=(\S+) CPU_IDs=(\S+) Mem=\S+ GRES=(\S*)",
                                        record):
        idx = re.search(r"IDX:([0-9,-]+)", gres)
        for host in hostlist.expand_hostlist(nodes):
            out[host] = (_ids(cpus), _ids(idx[1]) if idx else ())
    return out


def _ids(spec):
    return tuple(int(x[1:]) for x in hostlist.expand_hostlist(f"x[{spec}]"))


def het_job(jobs, leader):
    mine = [j for j in jobs if leader in j.slurm_ids]
    assert len(mine) == 1, mine
    return mine[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_window_makes_one_job_of_every_component(version):
    recording, _, collector = replay(version, "final")
    ids = recording["ids"]["hetjob"]
    assert len(ids) == 2
    result = collector.window(recording["since"])
    assert result.errors == []
    job = het_job(result.jobs, ids[0])
    assert job.job_id == ids[0] and not any(j.job_id == ids[1] for j in result.jobs)
    parts = sacct_parts(version, ids)
    assert [str(c) for c in job.het_components] == [f"{ids[0]}+0", f"{ids[0]}+1"]
    assert [c.job_id for c in job.het_components] == [r["job_id"] for r in parts] == ids
    assert job.start_time == _num(parts[0]["time"]["start"])
    assert job.end_time == max(_num(r["time"]["end"]) for r in parts)
    assert job.state == "COMPLETED" == _text(parts[0]["state"]["current"])
    hosts = [h for r in parts for h in hostlist.expand_hostlist(r["nodes"])]
    assert job.hostnames == tuple(dict.fromkeys(hosts)) and job.num_nodes == len(set(hosts))
    cpus = [next(t["count"] for t in r["tres"]["allocated"] if t["type"] == "cpu")
            for r in parts]
    assert job.num_hwthreads == sum(cpus) == 3 and job.num_acc == 1
    held = fixture_text(version, "testbed/scontrol-d-final.txt")
    expected = {}
    for job_id in ids:
        for host, (threads, _) in allocation(held, job_id).items():
            expected[host] = tuple(sorted({*expected.get(host, ()), *threads}))
    assert {r.hostname: r.hwthreads for r in job.resources} == expected
    assert job.allocation_known and job.job_script.startswith("#!/bin/sh")
    assert job.slurm_info.startswith(f"JobId={ids[0]} ") and f"\n\nJobId={ids[1]} " in \
        job.slurm_info
    body = start_job_body(job)
    assert body["jobId"] == ids[0] and body["numNodes"] == len(body["resources"])
    assert body["metaData"]["hetJobComponents"] == f"{ids[0]}+0={ids[0]},{ids[0]}+1={ids[1]}"


@pytest.mark.parametrize("version", VERSIONS)
def test_gpus_of_the_running_het_job(version):
    recording, _, collector = replay(version, "busy")
    ids = recording["ids"]["hetjob"]
    job = het_job(collector.window(recording["since"]).jobs, ids[0])
    held = fixture_text(version, "testbed/scontrol-d-busy.txt")
    gpus = {h: tuple(str(i) for i in g) for job_id in ids
            for h, (_, g) in allocation(held, job_id).items() if g}
    assert len(gpus) == 1 and sum(map(len, gpus.values())) == 1 == job.num_acc
    assert {r.hostname: r.accelerators for r in job.resources if r.accelerators} == gpus
    assert job.started and not job.finished and job.end_time == 0


@pytest.mark.parametrize(("version", "scenario"), CASES)
def test_listed_and_read_by_the_leaders_id(version, scenario):
    """stale-jobs and cc-cache ask for the open run's job id, the leader's: sacct answers
    with every component, and the run ends with the last of them."""
    recording, runner, collector = replay(version, scenario)
    ids = recording["ids"]["hetjob"]
    (stamp,) = collector.stamps_of(ids[:1]).stamps
    listing = next(e for e in runner.answers("sacct") if "-P" in e["argv"]
                   and "--jobs" in e["argv"]
                   and e["argv"][e["argv"].index("--jobs") + 1] == str(ids[0]))
    assert {line.split("|")[0] for line in listing["stdout"].split()} == set(map(str, ids))
    assert stamp.job_id == ids[0] and stamp.started
    assert stamp.finished is (scenario == "final")
    (job,) = collector.jobs_by_id(ids[:1], starts=()).jobs
    assert job.slurm_ids == tuple(ids)
    assert (job.job_id, job.start_time) == stamp.run and job.finished is stamp.finished
    assert job.num_hwthreads == 3 and len(job.resources) == 2


@pytest.mark.parametrize(("version", "scenario"), CASES)
def test_fast_path_builds_the_same_job_whichever_component_it_is_told_of(version, scenario):
    recording, runner, collector = replay(version, scenario)
    ids = recording["ids"]["hetjob"]
    both, missing = collector.controller_jobs(ids, scripts_for=ids)
    assert missing == [] and len(both) == 1
    processes = runner.calls["scontrol"]
    alone, missing = collector.controller_jobs(ids[1:], scripts_for=ids[1:])
    assert missing == [] and alone == both
    # the component's record names its leader, read in a second process with its script
    assert runner.calls["scontrol"] == processes + 2
    (job,) = both
    assert job.job_id == ids[0] and job.slurm_ids == tuple(ids)
    assert job.num_hwthreads == 3 and len(job.resources) == 2
    assert job.finished is (scenario == "final")
    assert job.job_script.startswith("#!/bin/sh")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_hook_runs_once_per_component(version):
    """slurmctld runs PrologSlurmctld and EpilogSlurmctld for each component, with the
    component's own SLURM_JOB_ID and the leader's SLURM_HET_JOB_ID."""
    recording = fixture_json(version, "testbed/workload.json")
    ids = recording["ids"]["hetjob"]
    messages = fixture_json(version, "testbed/hook-hetjob.json")
    seen = sorted((m["SLURM_JOB_ID"], m["SLURM_SCRIPT_CONTEXT"]) for m in messages)
    assert seen == sorted((str(i), c) for i in ids
                          for c in ("prolog_slurmctld", "epilog_slurmctld"))
    for m in messages:
        offset = ids.index(int(m["SLURM_JOB_ID"]))
        assert (m["SLURM_HET_JOB_ID"], m["SLURM_HET_JOB_OFFSET"]) == (str(ids[0]), str(offset))
        msg = parse_message(json.dumps(m).encode(), recording["cluster"])
        assert msg.job_id == ids[offset]


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_path_from_the_recorded_hook_messages(version, tmp_path):
    recording, _, collector = replay(version, "final")
    ids = recording["ids"]["hetjob"]
    messages = [parse_message(json.dumps(m).encode(), recording["cluster"])
                for m in fixture_json(version, "testbed/hook-hetjob.json")]
    box = Outbox(tmp_path / "o.sqlite")
    woken = threading.Event()
    fast = FastPath(collector, box, woken.set, coalesce=0.3).start()
    try:
        for msg in messages:  # every component's prolog, then every epilog
            if msg.event == "start":
                fast.submit(msg)
        assert woken.wait(10)
        woken.clear()
        epilog = next(m for m in messages if m.event == "end" and m.job_id == ids[1])
        fast.submit(epilog)  # one component's epilog alone: the het job is read whole
        until = time.time() + 10
        while fast.received < 3 or fast._pending:
            assert time.time() < until
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        fast.stop()
    events = [(e.job_id, e.kind) for e in box.due()]
    assert events == [(ids[0], "start")]  # the stop follows its delivered start
    counts = box.stats()["counts"]
    assert counts == {"start:pending": 1, "stop:pending": 1}
    box.close()
