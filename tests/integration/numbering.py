"""The jobs, samples and expectations of issue 45's test of cc-backend's numbering
(tests/integration/test_numbering_live.py) and of its side-by-side benchmark
(tests/bench/numbering_side_by_side.py).

The test bed's nodes 3 and 4 (partition ``topo``) are SMT nodes of 2 sockets x 4 cores x 2
threads; cc-backend's cluster.json (tests/ccbackend_site.py) numbers them as Linux numbers
such servers, not as Slurm does: node 3 one socket after the other, the sibling of core i
being OS id i + 8, and its two GPUs by PCI address; node 4 the same with interleaved
sockets (socket 0 the even ids). What each job should be held with is computed here from
``scontrol show job -d`` (its ``CPU_IDs`` and GPU ``IDX``, read by
tests/integration/workload.py, not by the product) and the layout Linux gives such a node
(:func:`os_id`, written out here, not the cluster.json the product reads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.ccbackend import CcBackend
from tests.ccbackend_site import PCI_GPUS, SMT
from tests.integration.sync_scenario import wait_for
from tests.integration.workload import Cluster, Submitted, capture_running, het_ids
from tests.metricstore import TIMESTEP, job_series, line, write


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
    page: dict = field(default_factory=dict)  # what a browser found on the GPU job's page
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


def run_jobs(sub: Submitted, jobs: dict[str, list[str]]) -> list[int]:
    """Submit ``jobs`` and wait until all run, their allocations read from slurmctld; the
    job ids (a het job's leader, each array task)."""
    cluster = sub.cluster
    submit(sub, jobs)

    def all_running() -> bool:
        if "array-of" in sub.ids and len(sub.ids["array"]) < 2:
            sub.ids["array"] = array_tasks(cluster, sub.ids["array-of"][0])
        capture_running(sub)
        return all(i in sub.truth_cpus for name, ids in sub.ids.items()
                   if name != "array-of" for i in ids) and len(sub.ids.get("array", [0, 0])) == 2

    wait_for(all_running, 120, f"{cluster.name}: the numbering jobs did not all run")
    return [ids[0] if name == "het" else i for name, ids in sub.ids.items()
            if name in jobs for i in (ids if name != "het" else ids[:1])]


def hold(run: NumberingRun, wanted: list[int], timeout: float = 30,
         strict: bool = True) -> None:
    """Wait until cc-backend holds (has committed) the starts of ``wanted``; keep them.
    Not ``strict``: keep what it holds after ``timeout`` (another product's, which may
    never send some)."""
    cluster, cc = run.cluster, run.cc
    try:
        wait_for(lambda: {b["jobId"] for b in cc.started(cluster.name)} >= set(wanted),
                 timeout, f"{cluster.name}: starts not held (committed) within {timeout:.0f} s")
    except TimeoutError:
        if strict:
            raise
    listed = {b["jobId"]: b for b in cc.started(cluster.name)}
    for job_id in wanted:
        if job_id in listed:
            run.held[job_id] = listed[job_id]


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
    job_ids = [j for j in job_ids if j in listed]
    if not job_ids:
        return
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


def job_page(cc: CcBackend, db_id: int, shot: Path) -> dict:
    """The job's page in cc-backend's web interface, as a person opens it (Chromium,
    headless, logged in): how many plots it draws and which metrics it says it has no
    data of; a screenshot in ``shot``."""
    from selenium.webdriver.common.by import By

    from tests.integration.test_demo_web import chromium

    user, password = cc.login()
    with chromium() as b:
        b.get(f"{cc.server_url}/login")
        b.find_element(By.ID, "username").send_keys(user)
        b.find_element(By.ID, "password").send_keys(password)
        b.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait_for(lambda: "/login" not in b.current_url, 30, "the login accepted")
        b.get(f"{cc.server_url}/monitoring/job/{db_id}")
        wait_for(lambda: len(b.find_elements(By.CSS_SELECTOR, ".uplot canvas")) >= 2, 60,
                 f"plots on the page of job {db_id}")
        time.sleep(2)  # every panel answered
        text = b.find_element(By.TAG_NAME, "body").text
        b.save_screenshot(str(shot))
        return {"plots": len(b.find_elements(By.CSS_SELECTOR, ".uplot canvas")),
                "without data": sorted(m for m in ("cpu_user", "acc_utilization", "cpu_load")
                                       if f"No dataset(s) returned for {m}" in text),
                "shot": str(shot)}


def expected(sub: Submitted, job_id: int
             ) -> tuple[dict[str, set[int]], dict[str, set[str]]]:
    """What the job should be held with: Slurm's allocation of each of its components in
    the nodes' OS numbering, its GPU indices as the topology's PCI addresses."""
    smt, interleaved = sub.cluster.smt_nodes
    parts = sub.ids["het"] if job_id == sub.ids.get("het", [None])[0] else [job_id]
    cpus: dict[str, set[int]] = {}
    gpus: dict[str, set[str]] = {}
    for part in parts:
        for host, ids in sub.truth_cpus[part].items():
            assert host in (smt, interleaved), (job_id, host)
            cpus.setdefault(host, set()).update(os_id(i, host == interleaved) for i in ids)
            gpus.setdefault(host, set()).update(PCI_GPUS[i]
                                                for i in sub.truth_gpus[part].get(host, ()))
    return cpus, gpus
