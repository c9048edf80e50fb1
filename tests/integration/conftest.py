"""Session fixtures: the test-bed clusters, the workload run once on each, in parallel."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from ccadapter.config.keys import Config
from ccadapter.slurm.collector import Collector, CollectorSettings, QueryResult
from ccadapter.slurm.runner import SlurmRunner
from tests.conftest import VERSIONS, unavailable
from tests.integration.scale_bed import scale_cluster, scale_testbed  # noqa: F401 (fixtures)
from tests.integration.workload import (
    Cluster,
    Listings,
    Submitted,
    cancel_leftovers,
    drive,
    listings,
    sacct_truth,
    submit,
    testbed_clusters,
    wait_running,
)


@pytest.fixture(scope="session")
def testbed() -> dict[str, Cluster]:
    clusters = {c.short: c for c in testbed_clusters()}
    missing = sorted(set(VERSIONS) - set(clusters))
    if missing:
        msg = f"test-bed clusters not up: {missing} (run tests/testbed/slurm up)"
        unavailable(msg)
    for c in clusters.values():
        if c.short in VERSIONS and (left := cancel_leftovers(c)):
            print(f"\n{c.name}: cancelled {len(left)} jobs left by an earlier run: {left}")
    return clusters


def cluster_config(cluster: Cluster, **extra) -> Config:
    return Config(slurmCommandPrefix=list(cluster.prefix), **extra)


@dataclass
class WorkloadRun:
    """One cluster's workload: Slurm's truth and the collector's answers.

    ``busy``/``busy_cli`` were taken while most jobs ran (GPU indices exist only then:
    slurmctld drops them when a job ends); ``final``/``runner`` after every job ended."""

    sub: Submitted
    busy: QueryResult
    busy_cli: list[dict]
    busy_ids: list[int]  # job ids known when the busy snapshot was taken
    final: QueryResult
    runner: SlurmRunner
    busy_listings: Listings  # a window listed as polls ask it and as slurmdbd's RUNNING rule
    final_listings: Listings


def cli_jobs(cluster: Cluster, tmp_dir: Path) -> list[dict]:
    cfg = tmp_dir / f"config-{cluster.name}.json"
    cfg.write_text(json.dumps({"slurmCommandPrefix": list(cluster.prefix)}))
    out = subprocess.run(
        [sys.executable, "-m", "ccadapter", "jobs", "--since", "1h", "--format", "json",
         "--config", str(cfg)],
        capture_output=True, text=True, timeout=120, check=True, stdin=subprocess.DEVNULL)
    return json.loads(out.stdout)


def _run_workload(cluster: Cluster, tmp_dir: Path) -> WorkloadRun:
    config = cluster_config(cluster)
    busy: dict = {}

    def while_busy(sub: Submitted) -> None:
        wait_running(cluster, sub.ids["gpujob"][0])
        # The ids slurmdbd holds *before* the CLI asks: array tasks that start later get their
        # ids later, and a job submitted a moment ago may not have reached slurmdbd yet.
        busy["ids"] = sorted(sacct_truth(cluster, sub.all_ids()))
        collector = Collector(SlurmRunner(config.slurm_command_prefix),
                              CollectorSettings.from_config(config))
        busy["result"] = collector.window(sub.submitted_at - 5)
        busy["listings"] = listings(cluster, collector, sub.submitted_at - 5)
        busy["cli"] = cli_jobs(cluster, tmp_dir)

    sub = submit(cluster)
    drive(sub, while_busy=while_busy)
    runner = SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout)
    settings = CollectorSettings.from_config(config)
    final = Collector(runner, settings).window(sub.submitted_at - 5)
    lister = Collector(SlurmRunner(config.slurm_command_prefix), settings)  # calls not counted
    return WorkloadRun(sub, busy["result"], busy["cli"], busy["ids"], final, runner,
                       busy["listings"], listings(cluster, lister, sub.submitted_at - 5))


def each_at_once(run, clusters, tmp_path_factory, prefix: str) -> dict:
    """``run(cluster, tmp_dir)`` on every cluster at once (version -> cluster); version ->
    its result, or the exception it raised (for that cluster's test to re-raise)."""
    results: dict = {}
    with ThreadPoolExecutor(len(clusters)) as pool:
        futures = {v: pool.submit(run, c, tmp_path_factory.mktemp(f"{prefix}{v}"))
                   for v, c in clusters.items()}
        for v, future in futures.items():
            try:
                results[v] = future.result()
            except Exception as exc:
                results[v] = exc
    return results


@pytest.fixture(scope="session")
def workloads(testbed, tmp_path_factory) -> dict[str, WorkloadRun]:
    """The workload mix on every cluster at once (the timeout job alone takes ~1.5 min)."""
    with ThreadPoolExecutor(len(testbed)) as pool:
        tmp = tmp_path_factory.mktemp("cli")
        futures = {v: pool.submit(_run_workload, c, tmp) for v, c in testbed.items()}
        return {v: f.result() for v, f in futures.items()}


@pytest.fixture(params=VERSIONS)
def workload(request, workloads):
    """Each version's workload run; a heavy suite keeps to HEAVY_VERSIONS with
    ``@pytest.mark.parametrize("workload", HEAVY_VERSIONS, indirect=True)``."""
    return workloads[request.param]


def hook_configured(cluster: Cluster) -> bool:
    return "PrologSlurmctld=/usr/local/sbin/ccadapter-testbed-hook" in Path(
        cluster.slurm_conf).read_text()


def _hooked(testbed: dict[str, Cluster], version: str) -> Cluster:
    c = testbed[version]
    if not hook_configured(c):
        pytest.fail(f"{c.name}: slurm.conf has no hook (run tests/run, which sets "
                    "CCADAPTER_HOOK_PY for tests/testbed/slurm up)")
    return c


@pytest.fixture(params=VERSIONS)
def cluster(request, testbed) -> Cluster:
    """Each cluster, with the hook configured (tests that start the daemon on its port); a
    heavy suite keeps to HEAVY_VERSIONS with ``@pytest.mark.parametrize("cluster",
    HEAVY_VERSIONS, indirect=True)``."""
    return _hooked(testbed, request.param)
