"""Every benchmark of the project in one command; writes BENCHMARKS.md (the whole file).

The measurements are those of the per-issue scripts (tests.bench.collector, .delivery, .hook,
.nats), called here as functions; this module only plans the runs, takes medians and ratios,
and writes the file with each figure beside its target and beside what cc-slurm-adapter, the
tool we replace, documents (60 s polling, "< 5 s" from a hook event to cc-backend, "< 50 MB").

Run as root with the test bed up, holding the test bed's lock:

    flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.all [--runs 5]

``--quick`` (2 runs, shorter windows, fewer jobs) is for development; the file says which
plan produced it. ``--only SECTION,...`` measures some sections (the others read "not run").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.bench import render

REPO = Path(__file__).resolve().parents[2]
# Run in this order: the test bed's parts last, after half an hour without jobs, so that
# the idle measurements (idle CPU first) see clusters that are really idle.
SECTIONS = ("parse", "pipeline", "nats", "idle-cpu", "cycles", "memory", "hook")


@dataclass(frozen=True)
class Plan:
    runs: int  # repetitions behind every median
    small_jobs: int = 10_000  # pipeline backlogs, in jobs (1 job = start + stop)
    large_jobs: int = 100_000
    workers: int = 16
    idle_window: float = 60.0  # seconds of idling measured per run, a multiple of the poll
    idle_poll: int = 60
    busy_tasks: int = 10
    latency_jobs: int = 50  # per cluster; each job one sample of start and of stop latency
    wall_pairs: int = 50  # hook / bare interpreter, alternately
    nats_events: int = 5000
    parse_jobs: int = 10_000
    quick: bool = False


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(runs=args.runs or 2, latency_jobs=20, wall_pairs=20,
                    nats_events=2000, quick=True)
    else:
        plan = Plan(runs=args.runs or 5)
    if args.idle_window:
        plan = Plan(**{**asdict(plan), "idle_window": args.idle_window})
    return plan


# --- measurements: each returns plain data for render -------------------------------------


def measure_parse(plan: Plan, clusters: list) -> dict:
    from tests.bench.collector import parse_times
    from tests.conftest import VERSIONS

    rows = []
    for version in VERSIONS:
        times, size = parse_times(version, plan.parse_jobs, plan.runs)
        rows.append({"version": version, "size": size, "times": times})
    return {"jobs": plan.parse_jobs, "rows": rows}


def measure_pipeline(plan: Plan, clusters: list) -> dict:
    from tests.bench.delivery import throughput

    out = {"workers": plan.workers}
    for key, jobs in (("small", plan.small_jobs), ("large", plan.large_jobs)):
        out[key] = {"jobs": jobs, "runs": throughput(plan.runs, 2 * jobs, plan.workers)}
        _progress(f"pipeline {jobs} jobs: {_rates(out[key]['runs'])}")
    return out


def measure_nats(plan: Plan, clusters: list) -> dict:
    from tests.bench.nats import rates

    return {"events": plan.nats_events, "rates": rates(plan.runs, plan.nats_events)}


def measure_cycles(plan: Plan, clusters: list) -> dict:
    from tests.bench.delivery import busy_cycle_calls, idle_cycle_calls

    rows = []
    for c in _need(clusters):
        rows.append({"version": c.version, "idle": idle_cycle_calls(c, plan.runs),
                     "busy": busy_cycle_calls(c, plan.runs, plan.busy_tasks)})
    return {"tasks": plan.busy_tasks, "rows": rows}


def measure_memory(plan: Plan, clusters: list) -> dict:
    from tests.bench.delivery import steady_rss

    return {"rows": [{"version": c.version, "rss": steady_rss(c, plan.runs)}
                     for c in _need(clusters)]}


def measure_idle_cpu(plan: Plan, clusters: list) -> dict:
    from tests.bench.delivery import idle_cpu

    runs = []
    for i in range(plan.runs):
        runs.append(idle_cpu(_need(clusters), plan.idle_window, plan.idle_poll))
        _progress(f"idle cpu run {i + 1}: "
                  + ", ".join(f"{r['version']} {r['cpu_s']:.2f} s" for r in runs[-1]))
    return {"window": plan.idle_window, "poll": plan.idle_poll, "runs": runs}


def measure_hook(plan: Plan, clusters: list) -> dict:
    from tests.bench.hook import hook_wall, latencies

    rows = []
    for c in _need(clusters):
        rows.append({"version": c.version, "lat": latencies(c, plan.latency_jobs)})
        _progress(f"hook latency {c.version} done")
    hook_t, bare_t = hook_wall(_need(clusters)[0], plan.wall_pairs)
    return {"jobs": plan.latency_jobs, "rows": rows, "pairs": plan.wall_pairs,
            "wall_version": _need(clusters)[0].version, "hook_s": hook_t, "bare_s": bare_t}


MEASURES: dict[str, Callable[[Plan, list], dict]] = {
    "parse": measure_parse, "pipeline": measure_pipeline, "nats": measure_nats,
    "cycles": measure_cycles, "memory": measure_memory, "idle-cpu": measure_idle_cpu,
    "hook": measure_hook,
}


def _need(clusters: list) -> list:
    if not clusters:
        raise RuntimeError("the test bed is down (tests/testbed/slurm info lists no cluster)")
    return clusters


def _rates(runs: list[dict]) -> str:
    return ", ".join(f"{r['events'] / r['seconds']:,.0f}/s" for r in runs)


def _progress(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def run_sections(plan: Plan, sections: list[str], command: str) -> tuple[dict, dict]:
    """Every section even when one fails: its error goes into the file, not a lost run.
    The measurements so far are kept after each section (a run cut short can be rendered)."""
    started_all = time.monotonic()
    from tests.integration.workload import testbed_clusters

    clusters = testbed_clusters()
    results: dict[str, Any] = {}
    raw = Path(tempfile.gettempdir()) / f"ccadapter-bench-{int(time.time())}.json"
    _progress(f"measurements kept in {raw} (--from-raw renders them)")
    for name in sections:
        _progress(f"{name} ...")
        started = time.monotonic()
        try:
            results[name] = MEASURES[name](plan, clusters)
        except Exception as exc:  # reported in the file and the exit code
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["took"] = time.monotonic() - started
        _progress(f"{name} took {results[name]['took']:.0f} s")
        meta = {**machine(), "command": command, "took": time.monotonic() - started_all}
        raw.write_text(json.dumps({"plan": asdict(plan), "results": results, "meta": meta}))
    return results, meta


def machine() -> dict[str, str]:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "ccadapter"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return {"commit": commit + (" (ccadapter/ modified)" if dirty else ""),
            "cpus": str(os.cpu_count()), "python": platform.python_version(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                time.gmtime())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, help="runs behind each median (default 5; 2 --quick)")
    ap.add_argument("--quick", action="store_true", help="fewer runs and shorter windows")
    ap.add_argument("--idle-window", type=float, help="seconds of idling per run (default 60)")
    ap.add_argument("--only", help=f"comma-separated sections of {','.join(SECTIONS)}")
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--from-raw", metavar="JSON", help="render a kept run; measure nothing")
    args = ap.parse_args()
    sections = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    if args.from_raw:  # render again what a run measured (the prose may have changed)
        raw = json.loads(Path(args.from_raw).read_text())
        plan, results, meta = Plan(**raw["plan"]), raw["results"], raw["meta"]
    else:
        plan = make_plan(args)
        command = " ".join(["flock /tmp/ccadapter-integration.lock .venv/bin/python -m "
                            "tests.bench.all", *map(shlex.quote, sys.argv[1:])])
        results, meta = run_sections(plan, sections, command)
    Path(args.out).write_text(render.document(plan, results, meta))
    _progress(f"wrote {args.out}")
    failed = [name for name, r in results.items() if "error" in r]
    if failed:
        _progress(f"failed sections: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
