"""Issue 45 on real Slurm 22.05, 24.11 and 26.05 and the real cc-backend 1.5.4: each job is
held with the OS ids of what Slurm allocated it, and cc-backend's metric store answers each
job with exactly its own series (the nodes, jobs and expectations: tests/integration/
numbering.py).

The jobs: one task (Slurm's ``CR_Core`` gives it a whole core, both threads), two cores, a
socket's eight CPUs, a GPU, a het job over both nodes, two array tasks, then a whole node;
several share each node.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.ccbackend import CcBackend
from tests.conftest import HEAVY_VERSIONS
from tests.integration.conftest import each_at_once, hook_configured
from tests.integration.numbering import (
    NumberingRun,
    expected,
    hold,
    job_page,
    measure,
    node_job,
    run_jobs,
    sample_value,
    shared_jobs,
)
from tests.integration.sync_scenario import DaemonProc, wait_for
from tests.integration.test_hook_live import start_daemon
from tests.integration.workload import Cluster, Submitted

pytestmark = pytest.mark.integration


def numbering_run(cluster: Cluster, tmp: Path) -> NumberingRun:
    # jobs are read from cc-backend's job table (the metric API reads no other): its commit
    # worker runs, and every start is committed before any stop (a stop that meets a commit
    # while its job is in the cache stops another job, tests/ccbackend.py)
    cc = CcBackend(tmp / "cc-backend", [cluster], commit_interval="3s").start()
    run = NumberingRun(cluster, cc, Submitted(cluster))
    smt, interleaved = cluster.smt_nodes
    daemon: DaemonProc | None = None
    try:
        daemon = start_daemon(cluster, cc, tmp)
        run.sub.submitted_at = time.time()
        wanted = run_jobs(run.sub, shared_jobs(smt, interleaved))
        hold(run, wanted)
        measure(run, wanted)
        if cluster.short == HEAVY_VERSIONS[0]:  # one browser: the GPU job's page
            gpu = run.sub.ids["gpu"][0]
            db_id = next(j["id"] for j in cc.jobs(cluster.name, state="running")
                         if j["jobId"] == gpu)
            run.page = job_page(cc, db_id, tmp / "gpu-job-page.png")
        cluster.run("scancel", *map(str, run.sub.all_ids()), check=False)
        wait_for(lambda: not cluster.run("squeue", "-h", "-p", "topo", "-o", "%A",
                                         check=False).strip(), 60,
                 f"{cluster.name}: the shared jobs did not end")
        wanted = run_jobs(run.sub, node_job(interleaved))
        hold(run, wanted)
        measure(run, wanted)
    except BaseException:
        cc.stop()
        raise
    finally:
        cluster.run("scancel", *map(str, run.sub.all_ids()), check=False)
        if daemon is not None:
            run.exit_code = daemon.terminate()
            run.log = daemon.log.read_text()
    return run


@pytest.fixture(scope="module")
def numbering_runs(testbed, tmp_path_factory):
    clusters = {v: testbed[v] for v in HEAVY_VERSIONS}
    for c in clusters.values():
        if not hook_configured(c) or len(c.smt_nodes) != 2:
            pytest.fail(f"{c.name}: no hook or no SMT nodes (run tests/run, which brings the "
                        "test bed up with both)")
    runs = each_at_once(numbering_run, clusters, tmp_path_factory, "numbering")
    yield runs
    for run in runs.values():
        if isinstance(run, NumberingRun):
            run.cc.stop()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_each_job_is_held_with_the_os_ids_of_its_allocation(numbering_runs, version):
    run = numbering_runs[version]
    if isinstance(run, BaseException):
        raise run
    assert run.exit_code == 0
    assert len(run.held) == 8  # socket, gpu, thread, cores, 2 array tasks, het, node
    names = {i: n for n, ids in run.sub.ids.items() if n != "array-of" for i in ids}
    by_host: dict[str, list[tuple[int, set[int]]]] = {}
    for job_id, body in run.held.items():
        sent = {r["hostname"]: (r.get("hwthreads"), r.get("accelerators"))
                for r in body["resources"]}
        print(f"\n{run.cluster.name} {names[job_id]} {job_id}: Slurm CPU_IDs "
              f"{ {h: list(c) for h, c in run.sub.truth_cpus[job_id].items()} }, held {sent}")
        cpus, gpus = expected(run.sub, job_id)
        held = {r["hostname"]: set(r.get("hwthreads") or ()) for r in body["resources"]}
        assert held == cpus, (job_id, run.sub.truth_cpus)
        assert {r["hostname"]: set(r.get("accelerators") or ()) for r in body["resources"]} \
            == gpus, job_id
        assert body["numHwthreads"] == sum(map(len, cpus.values())), job_id
        for host, ids in held.items():
            by_host.setdefault(host, []).append((job_id, ids))
    node = run.sub.ids["node"][0]
    assert expected(run.sub, node)[0] == {run.cluster.smt_nodes[1]: set(range(16))}
    gpu = run.sub.ids["gpu"][0]
    assert len(expected(run.sub, gpu)[1][run.cluster.smt_nodes[0]]) == 1
    for host, jobs in by_host.items():  # jobs that ran at once never share an id
        shared = [j for j in jobs if j[0] != node]
        for i, (a, ids_a) in enumerate(shared):
            for b, ids_b in shared[i + 1:]:
                assert not ids_a & ids_b, (host, a, b)
    assert "sent in Slurm's numbering" not in run.log  # every node was mapped
    assert "Traceback" not in run.log and run.cc.token not in run.log


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", HEAVY_VERSIONS)
def test_the_metric_store_answers_each_job_with_exactly_its_own_series(numbering_runs, version):
    run = numbering_runs[version]
    if isinstance(run, BaseException):
        raise run
    assert set(run.metrics) == set(run.held)
    for job_id, scopes in run.metrics.items():
        cpus, gpus = expected(run.sub, job_id)
        want = {"hwthread": {(h, str(i)) for h, ids in cpus.items() for i in ids},
                "accelerator": {(h, g) for h, ids in gpus.items() for g in ids}}
        for scope, series in scopes.items():
            assert set(series) == want[scope], (job_id, scope)
            for (host, type_id), values in series.items():
                seen = [v for v in values if v is not None]
                assert seen and set(seen) == {sample_value(scope, type_id)}, \
                    (job_id, host, type_id, values)
        assert ("accelerator" in scopes) == bool(want["accelerator"]), job_id
    print(f"\n{run.cluster.name}: {len(run.metrics)} jobs, each answered with its own "
          f"{sum(len(s) for m in run.metrics.values() for s in m.values())} series in all")


def test_a_jobs_page_plots_its_own_metrics(numbering_runs):
    """The GPU job's page on 22.05 draws its CPU and GPU metrics, where it said "No
    dataset(s) returned" for every panel before the resources were in cc-backend's numbering
    (cpu_load has no samples here: its panel still says so)."""
    run = numbering_runs[HEAVY_VERSIONS[0]]
    if isinstance(run, BaseException):
        raise run
    print(f"\nthe GPU job's page: {run.page}")
    assert run.page["plots"] >= 2, run.page
    assert not {"cpu_user", "acc_utilization"} & set(run.page["without data"]), run.page
