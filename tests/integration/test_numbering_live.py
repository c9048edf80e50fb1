"""Issue 45 on real Slurm 22.05, 24.11 and 26.05 and the real cc-backend 1.5.4: each job is
held with the OS ids of what Slurm allocated it, and cc-backend's metric store answers each
job with exactly its own series.

The test bed's nodes 3 and 4 (partition ``topo``) are SMT nodes of 2 sockets x 4 cores x 2
threads; cc-backend's cluster.json (tests/ccbackend_site.py) numbers them as Linux numbers
such servers, not as Slurm does: node 3 one socket after the other, the sibling of core i
being OS id i + 8, and its two GPUs by PCI address; node 4 the same with interleaved
sockets (socket 0 the even ids). The jobs: one task (Slurm's ``CR_Core`` gives it a whole
core, both threads), two cores, a socket's eight CPUs, a GPU, a het job over both nodes, two
array tasks, then a whole node; several share each node. What each should be held with is
computed here from ``scontrol show job -d`` (its ``CPU_IDs`` and GPU ``IDX``, read by
tests/integration/workload.py, not by the product) and the layout Linux gives such a node
(:func:`os_id`, written out here, not the cluster.json the product reads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ccbackend import CcBackend
from tests.ccbackend_site import PCI_GPUS, SMT
from tests.conftest import HEAVY_VERSIONS
from tests.integration.conftest import each_at_once, hook_configured
from tests.integration.sync_scenario import DaemonProc, wait_for
from tests.integration.test_hook_live import start_daemon
from tests.integration.workload import Cluster, Submitted, capture_running, het_ids
from tests.metricstore import TIMESTEP, job_series, line, write

pytestmark = pytest.mark.integration


def shared_jobs(smt: str, interleaved: str) -> dict[str, list[str]]:
    """What runs at once: three jobs on each node (the het job on both)."""
    topo = ["-p", "topo", "--mem-per-cpu=100"]
    return {
        "socket": [*topo, "-w", smt, "-n1", "-c8"],
        "gpu": [*topo, "-w", smt, "-n1", "-c2", "--gres=gpu:tesla:1"],
        "thread": [*topo, "-w", interleaved, "-n1"],
        "cores": [*topo, "-w", interleaved, "-n1", "-c4"],
        "array": [*topo, "-w", interleaved, "-n1", "--array=0-1"],
        "het": [*topo, "-w", smt, "-n1", ":", *topo, "-w", interleaved, "-n1"],
    }


def node_job(interleaved: str) -> dict[str, list[str]]:
    return {"node": ["-p", "topo", "--mem-per-cpu=100", "-w", interleaved, "--exclusive",
                     "-n1"]}


def os_id(cpu: int, interleaved: bool) -> int:
    """The Linux id of Slurm's abstract CPU ``cpu`` on a node of :data:`SMT`: Slurm counts
    socket by socket, core by core, thread by thread (doc/html/cpu_management.shtml); Linux
    numbers the first threads of all cores, then their siblings, cores one socket after the
    other or alternating between the sockets."""
    sockets, cores, threads = SMT
    socket, core, thread = cpu // (cores * threads), cpu // threads % cores, cpu % threads
    first = core * sockets + socket if interleaved else socket * cores + core
    return first + thread * sockets * cores


@dataclass
class NumberingRun:
    cluster: Cluster
    cc: CcBackend
    sub: Submitted
    held: dict[int, dict] = field(default_factory=dict)  # job id -> cc-backend's own record
    # job id -> scope -> (hostname, id) -> values, as GET /api/jobs/metrics/{id} answers
    metrics: dict[int, dict[str, dict]] = field(default_factory=dict)
    written: int = 0  # the time of the last samples written (a buffer takes them in order)
    log: str = ""
    exit_code: int = -1


def submit(sub: Submitted, jobs: dict[str, list[str]]) -> None:
    for name, args in jobs.items():
        out = sub.cluster.run("sbatch", "--parsable", "-J", f"numbering-{name}",
                              "-o", "/dev/null", *args, "--wrap", "sleep 300")
        first = int(out.strip().split(";")[0])
        if name == "het":
            sub.ids[name] = het_ids(sub.cluster, first)
        elif name == "array":
            sub.ids[name] = []  # the tasks' own ids, once they run
            sub.ids["array-of"] = [first]
        else:
            sub.ids[name] = [first]


def array_tasks(cluster: Cluster, array_id: int) -> list[int]:
    out = cluster.run("squeue", "-h", "-r", "-j", str(array_id), "-o", "%A %T", check=False)
    return sorted(int(a) for a, st in (ln.split() for ln in out.splitlines()) if st == "RUNNING")


def run_until_held(run: NumberingRun, jobs: dict[str, list[str]]) -> list[int]:
    """Submit ``jobs``, wait until all run and cc-backend holds their starts; the job ids
    (a het job's leader, each array task)."""
    cluster, sub, cc = run.cluster, run.sub, run.cc
    submit(sub, jobs)

    def all_running() -> bool:
        if "array-of" in sub.ids and len(sub.ids["array"]) < 2:
            sub.ids["array"] = array_tasks(cluster, sub.ids["array-of"][0])
        capture_running(sub)
        return all(i in sub.truth_cpus for name, ids in sub.ids.items()
                   if name != "array-of" for i in ids) and len(sub.ids.get("array", [0, 0])) == 2

    wait_for(all_running, 120, f"{cluster.name}: the numbering jobs did not all run")
    wanted = [ids[0] if name == "het" else i for name, ids in sub.ids.items()
              if name in jobs for i in (ids if name != "het" else ids[:1])]
    wait_for(lambda: {b["jobId"] for b in cc.started(cluster.name)} >= set(wanted), 30,
             f"{cluster.name}: starts not held (committed) within 30 s")
    listed = {b["jobId"]: b for b in cc.started(cluster.name)}
    for job_id in wanted:
        run.held[job_id] = listed[job_id]
    return wanted


def sample_value(kind: str, type_id: str) -> float:
    """What every sample of a hwthread or accelerator says: which one it is."""
    return float(type_id) if kind == "hwthread" else 50.0 + PCI_GPUS.index(type_id)


def measure(run: NumberingRun, job_ids: list[int]) -> None:
    """Samples of every hwthread of nodes 3 and 4 and of node 3's GPUs over the jobs' time
    (two timesteps at least), written as a collector writes them; then each job's series
    read as its page reads them."""
    cluster, cc = run.cluster, run.cc
    smt, interleaved = cluster.smt_nodes
    listed = {j["jobId"]: j for j in cc.jobs(cluster.name, state="running")}
    starts = [listed[j]["startTime"] for j in job_ids]
    time.sleep(max(0.0, max(starts) + 2 * TIMESTEP + 1 - time.time()))
    lines = []
    for at in range(max(min(starts) - TIMESTEP, run.written + TIMESTEP), int(time.time()),
                    TIMESTEP):
        for host in (smt, interleaved):
            lines += [line("cpu_user", host, "hwthread", str(i), sample_value("hwthread", str(i)),
                           at) for i in range(SMT[0] * SMT[1] * SMT[2])]
        lines += [line("acc_utilization", smt, "accelerator", pci,
                       sample_value("accelerator", pci), at) for pci in PCI_GPUS]
        run.written = at
    write(cc, cluster.name, lines)
    for job_id in job_ids:
        db_id = listed[job_id]["id"]
        run.metrics[job_id] = {"hwthread": job_series(cc, db_id, "cpu_user", "hwthread")}
        if listed[job_id].get("numAcc"):
            run.metrics[job_id]["accelerator"] = job_series(cc, db_id, "acc_utilization",
                                                            "accelerator")


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
        measure(run, run_until_held(run, shared_jobs(smt, interleaved)))
        cluster.run("scancel", *map(str, run.sub.all_ids()), check=False)
        wait_for(lambda: not cluster.run("squeue", "-h", "-p", "topo", "-o", "%A",
                                         check=False).strip(), 60,
                 f"{cluster.name}: the shared jobs did not end")
        measure(run, run_until_held(run, node_job(interleaved)))
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


def expected(run: NumberingRun, job_id: int) -> tuple[dict[str, set[int]], dict[str, set[str]]]:
    """What the job should be held with: Slurm's allocation of each of its components in
    the nodes' OS numbering, its GPU indices as the topology's PCI addresses."""
    sub, (smt, interleaved) = run.sub, run.cluster.smt_nodes
    parts = sub.ids["het"] if job_id == sub.ids["het"][0] else [job_id]
    cpus: dict[str, set[int]] = {}
    gpus: dict[str, set[str]] = {}
    for part in parts:
        for host, ids in sub.truth_cpus[part].items():
            assert host in (smt, interleaved), (job_id, host)
            cpus.setdefault(host, set()).update(os_id(i, host == interleaved) for i in ids)
            gpus.setdefault(host, set()).update(PCI_GPUS[i]
                                                for i in sub.truth_gpus[part].get(host, ()))
    return cpus, gpus


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
        cpus, gpus = expected(run, job_id)
        held = {r["hostname"]: set(r.get("hwthreads") or ()) for r in body["resources"]}
        assert held == cpus, (job_id, run.sub.truth_cpus)
        assert {r["hostname"]: set(r.get("accelerators") or ()) for r in body["resources"]} \
            == gpus, job_id
        assert body["numHwthreads"] == sum(map(len, cpus.values())), job_id
        for host, ids in held.items():
            by_host.setdefault(host, []).append((job_id, ids))
    node = run.sub.ids["node"][0]
    assert expected(run, node)[0] == {run.cluster.smt_nodes[1]: set(range(16))}
    gpu = run.sub.ids["gpu"][0]
    assert len(expected(run, gpu)[1][run.cluster.smt_nodes[0]]) == 1
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
        cpus, gpus = expected(run, job_id)
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
