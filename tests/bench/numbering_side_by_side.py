"""Issue 45, part 5: ccadapter beside cc-slurm-adapter on SMT nodes, each into its own real
cc-backend 1.5.4 with its metric store: what each product sends as a job's hwthreads and
GPUs, and what cc-backend's metric API then answers for the job.

The cluster is Slurm 25.05 (cc-slurm-adapter reads 24.x and 25.x), its nodes 3 and 4 the test
bed's SMT nodes, numbered in cc-backend's cluster.json as Linux numbers them
(tests/integration/numbering.py: the jobs, the samples, the expected OS ids, computed from
``scontrol show job -d`` by the benchmark, not by either product). Both products run at once,
each with its own Prolog/Epilog client from the test bed's wrapper, polling every 10 s; the
same samples (each naming its hwthread or GPU) go to both metric stores.

``python -m tests.bench.numbering_side_by_side`` writes
tests/bench/results/numbering-side-by-side.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ccadapter.runtime.lastrun import LastRun
from tests.bench.side_by_side import PRODUCTS
from tests.ccbackend import CcBackend
from tests.integration.numbering import (
    NumberingRun,
    expected,
    hold,
    measure,
    node_job,
    run_jobs,
    shared_jobs,
)
from tests.integration.sync_scenario import wait_for
from tests.integration.workload import (
    Cluster,
    Submitted,
    cancel_leftovers,
    testbed_clusters,
)
from tests.predecessor import Daemon, chain_hook, site_config, start_ccadapter, start_predecessor

POLL = 10


def _hosts(resources: list[dict[str, Any]], key: str) -> dict[str, list]:
    return {r["hostname"]: sorted(r.get(key) or []) for r in resources}


def record(sub: Submitted, runs: dict[str, NumberingRun], job_id: int, name: str
           ) -> dict[str, Any]:
    """One job: Slurm's allocation, the OS ids it should be held with, and per product what
    cc-backend holds and which series its metric API answers."""
    cpus, gpus = expected(sub, job_id)
    parts = sub.ids["het"] if name == "het" else [job_id]
    slurm: dict[str, list[int]] = {}
    for part in parts:
        for host, ids in sub.truth_cpus[part].items():
            slurm[host] = sorted({*slurm.get(host, []), *ids})
    out: dict[str, Any] = {"name": name, "job": job_id, "slurm": slurm,
                           "expected": {h: sorted(v) for h, v in cpus.items()},
                           "expected_gpus": {h: sorted(v) for h, v in gpus.items() if v}}
    for product, run in runs.items():
        if job_id not in run.held:
            out[product] = {"hwthreads": {}, "accelerators": {}, "held_right": False,
                            "series": [], "gpu_series": [], "series_right": False,
                            "absent": True}
            continue
        body = run.held[job_id]
        hw, acc = _hosts(body["resources"], "hwthreads"), _hosts(body["resources"],
                                                                 "accelerators")
        series = run.metrics.get(job_id, {})
        want = {(h, str(i)) for h, ids in cpus.items() for i in ids}
        want_acc = {(h, g) for h, ids in gpus.items() for g in ids}
        out[product] = {
            "hwthreads": hw, "accelerators": {h: v for h, v in acc.items() if v},
            "held_right": hw == out["expected"] and {h: v for h, v in acc.items() if v}
            == out["expected_gpus"],
            "series": sorted(f"{h}:{i}" for h, i in series.get("hwthread", {})),
            "gpu_series": sorted(f"{h}:{i}" for h, i in series.get("accelerator", {})),
            "series_right": set(series.get("hwthread", {})) == want
            and set(series.get("accelerator", {})) == want_acc,
        }
    return out


def start_products(cluster: Cluster, tmp: Path) -> tuple[dict[str, CcBackend],
                                                         dict[str, Daemon]]:
    ccs: dict[str, CcBackend] = {}
    daemons: dict[str, Daemon] = {}
    for p in PRODUCTS:
        # the commit worker runs (the metric API reads the job table only); every start is
        # committed before any stop (tests/ccbackend.py: a stop meeting a commit)
        ccs[p] = CcBackend(tmp / f"cc-{p}", [cluster], commit_interval="3s").start()
        listen = cluster.hook_socket if p == "ccadapter" else None
        conf = site_config(ccs[p].url, ccs[p].token, tmp / p, poll=POLL, listen=listen)
        LastRun(tmp / p / "lastrun").set(time.time() - 5)
        log = tmp / f"{p}.log"
        daemons[p] = (start_ccadapter(cluster, conf, log) if p == "ccadapter"
                      else start_predecessor(cluster, conf, log))
        if p == "cc-slurm-adapter":
            chain_hook(cluster, "cc-slurm-adapter", conf)
    daemons["ccadapter"].wait_log("listening for Prolog/Epilog")
    time.sleep(2)
    return ccs, daemons


def run(cluster: Cluster, tmp: Path) -> list[dict[str, Any]]:
    tmp.mkdir(parents=True, exist_ok=True)
    cancel_leftovers(cluster)
    smt, interleaved = cluster.smt_nodes
    sub = Submitted(cluster)
    ccs, daemons = start_products(cluster, tmp)
    runs = {p: NumberingRun(cluster, cc, sub) for p, cc in ccs.items()}
    jobs: list[dict[str, Any]] = []
    try:
        for phase in (shared_jobs(smt, interleaved), node_job(interleaved)):
            wanted = run_jobs(sub, phase)
            for r in runs.values():
                hold(r, wanted, timeout=3 * POLL + 30, strict=False)  # the predecessor polls
            for r in runs.values():
                measure(r, wanted)
            names = {i: n for n, ids in sub.ids.items() if n != "array-of" for i in ids}
            jobs += [record(sub, runs, j, names[j]) for j in wanted]
            cluster.run("scancel", *map(str, sub.all_ids()), check=False)
            wait_for(lambda: not cluster.run("squeue", "-h", "-p", "topo", "-o", "%A",
                                             check=False).strip(), 60, "the jobs did not end")
    finally:
        chain_hook(cluster, None)
        cluster.run("scancel", *map(str, sub.all_ids()), check=False)
        for d in daemons.values():
            d.stop()
        for cc in ccs.values():
            cc.stop()
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.numbering_side_by_side")
    ap.add_argument("--cluster", default="cluster2505")
    ap.add_argument("--out", type=Path, default=Path("/tmp/numbering-side-by-side"))
    args = ap.parse_args(argv)
    from tests.bench import results
    cluster = next(c for c in testbed_clusters() if c.name == args.cluster)
    started = time.time()
    jobs = run(cluster, args.out)
    for j in jobs:
        print(j["name"], j["job"], "Slurm", j["slurm"], "OS", j["expected"],
              {p: (j[p]["hwthreads"], j[p]["accelerators"], j[p]["held_right"],
                   j[p]["series_right"]) for p in PRODUCTS}, flush=True)
    results.write("numbering-side-by-side",
                  command=results.command_line("tests.bench.numbering_side_by_side", argv,
                                               lock=True),
                  receiver="cc-backend 1.5.4",
                  plan={"cluster": cluster.name, "version": cluster.version, "poll_s": POLL},
                  data={"jobs": jobs}, took_s=time.time() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
