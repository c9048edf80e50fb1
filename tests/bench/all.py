"""Every benchmark of the project in one command: each section's measurements go to its
results file (tests/bench/results/<section>.json, see tests.bench.results), then
BENCHMARKS.md is rendered from the results files (tests.bench.render).

The measurements are those of the per-issue modules (tests.bench.collector, .delivery, .hook,
.nats), called here as functions; this module plans the runs and stores what they return.

Run as root with the test bed up (with the hook), holding the test bed's lock:

    flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.all [--runs 5]

``--only SECTION,...`` measures some sections; the others keep their results files. The
sections that need no Slurm (parse, pipeline, nats) run without the test bed (the pipeline
delivers to the real cc-backend: its binary must be built, ``tests/testbed/ccbackend build``):

    .venv/bin/python -m tests.bench.all --only parse,pipeline,nats

``--quick`` (2 runs, fewer jobs) is for development; its plan is in the results file and the
rendered section says so. A section that fails keeps its previous results file; the command
exits 1 naming it. The CI duration (section ``ci``) is measured by tests.bench.ci_time.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tests.bench import render, results
from tests.bench.receivers import CC_BACKEND, STANDIN

# Run in this order: the test bed's parts last, after the Slurm-free ones, so that the idle
# measurements (idle CPU first) see clusters that are really idle.
SECTIONS = ("parse", "pipeline", "nats", "idle-cpu", "cycles", "memory", "hook")
NEEDS_TESTBED = frozenset({"idle-cpu", "cycles", "memory", "hook"})
# What each section's daemon delivers to (tests.bench.results.RECEIVERS): the pipeline to the
# real cc-backend (tests.bench.receivers), the idle and hook measurements to the in-process
# stand-in, the NATS rates to a nats-server alone; the parser delivers nothing.
RECEIVER_OF = {"parse": "none", "pipeline": CC_BACKEND, "nats": "nats-server",
               "idle-cpu": STANDIN, "cycles": STANDIN, "memory": STANDIN, "hook": STANDIN}


@dataclass(frozen=True)
class Plan:
    runs: int  # repetitions behind every median
    small_jobs: int = 10_000  # pipeline backlogs, in jobs (1 job = start + stop)
    large_jobs: int = 100_000
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
        plan = Plan(runs=args.runs or 2, small_jobs=2_000, large_jobs=20_000, latency_jobs=20,
                    wall_pairs=20, nats_events=2000, quick=True)
    else:
        plan = Plan(runs=args.runs or 5)
    if args.idle_window:
        plan = Plan(**{**asdict(plan), "idle_window": args.idle_window})
    return plan


# --- measurements: each returns (the plan it followed, raw data) ---------------------------

Measured = tuple[dict[str, Any], dict[str, Any]]


def measure_parse(plan: Plan, clusters: list) -> Measured:
    from tests.bench.collector import parse_times
    from tests.conftest import VERSIONS

    rows = []
    for version in VERSIONS:
        times, size = parse_times(version, plan.parse_jobs, plan.runs)
        rows.append({"version": version, "size": size, "times": times})
    return {"runs": plan.runs, "jobs": plan.parse_jobs, "quick": plan.quick}, {"rows": rows}


def measure_pipeline(plan: Plan, clusters: list) -> Measured:
    from tests.bench import ceiling, delivery, receivers

    data = {}
    for key, jobs in (("small", plan.small_jobs), ("large", plan.large_jobs)):
        data[key] = delivery.throughput(plan.runs, jobs)
        _progress(f"pipeline {jobs} jobs: " + ", ".join(
            f"{r['events_per_s']:,.0f} events/s of {r['ceiling_events_per_s']:,.0f}, "
            f"enqueue {r['jobs_per_s']:,.0f} jobs/s (parse {r['parse_jobs_per_s']:,.0f})"
            for r in data[key]))
    return ({"runs": plan.runs, "small_jobs": plan.small_jobs, "large_jobs": plan.large_jobs,
             "workers": delivery.daemon_workers(), "receiver": receivers.CC_BACKEND,
             "commit_interval": receivers.COMMIT_INTERVAL
             or f"{receivers.DEFAULT_COMMIT} (cc-backend's default)",
             "ceiling_threads": list(ceiling.THREADS),
             "ceiling_sample_jobs": ceiling.SAMPLE_JOBS,
             "chunk_jobs": delivery.CHUNK_JOBS, "poll_s": delivery.BACKLOG_POLL,
             "quick": plan.quick}, data)


def measure_nats(plan: Plan, clusters: list) -> Measured:
    from tests.bench.delivery import daemon_workers
    from tests.bench.nats import rates

    return ({"runs": plan.runs, "events": plan.nats_events, "workers": daemon_workers(),
             "quick": plan.quick},
            {"rates": rates(plan.runs, plan.nats_events)})


def measure_cycles(plan: Plan, clusters: list) -> Measured:
    from tests.bench.delivery import QUIET_WAIT, busy_cycle_calls, idle_cycle_calls

    rows = []
    for c in _need(clusters):
        rows.append({"version": c.version, "idle": idle_cycle_calls(c, plan.runs),
                     "busy": busy_cycle_calls(c, plan.runs, plan.busy_tasks)})
    return ({"runs": plan.runs, "tasks": plan.busy_tasks, "quiet_wait_s": QUIET_WAIT,
             "quick": plan.quick}, {"rows": rows})


def measure_memory(plan: Plan, clusters: list) -> Measured:
    from tests.bench.delivery import MEMORY_EVERY, MEMORY_POLL, steady_rss

    return ({"runs": plan.runs, "poll": MEMORY_POLL, "every_s": MEMORY_EVERY,
             "quick": plan.quick},
            {"rows": [{"version": c.version, "rss": steady_rss(c, plan.runs)}
                      for c in _need(clusters)]})


def measure_idle_cpu(plan: Plan, clusters: list) -> Measured:
    from tests.bench.delivery import QUIET_CPU, QUIET_SPAN, idle_cpu

    runs = []
    for i in range(plan.runs):
        runs.append(idle_cpu(_need(clusters), plan.idle_window, plan.idle_poll))
        _progress(f"idle cpu run {i + 1}: "
                  + ", ".join(f"{r['version']} {r['cpu_s']:.2f} s" for r in runs[-1]))
    return ({"runs": plan.runs, "window": plan.idle_window, "poll": plan.idle_poll,
             "quiet_cpu_s": QUIET_CPU, "quiet_span_s": QUIET_SPAN, "quick": plan.quick},
            {"runs": runs})


def measure_hook(plan: Plan, clusters: list) -> Measured:
    from tests.bench.hook import POLL, SUBMIT_GAP, hook_wall, latencies

    rows = []
    for c in _need(clusters):
        rows.append({"version": c.version, "lat": latencies(c, plan.latency_jobs)})
        _progress(f"hook latency {c.version} done")
    hook_t, bare_t = hook_wall(_need(clusters)[0], plan.wall_pairs)
    return ({"jobs": plan.latency_jobs, "pairs": plan.wall_pairs, "gap_s": SUBMIT_GAP,
             "poll": POLL, "quick": plan.quick},
            {"rows": rows, "wall_version": _need(clusters)[0].version, "hook_s": hook_t,
             "bare_s": bare_t})


MEASURES: dict[str, Callable[[Plan, list], Measured]] = {
    "parse": measure_parse, "pipeline": measure_pipeline, "nats": measure_nats,
    "cycles": measure_cycles, "memory": measure_memory, "idle-cpu": measure_idle_cpu,
    "hook": measure_hook,
}


def _need(clusters: list) -> list:
    if not clusters:
        raise RuntimeError("the test bed is down (tests/testbed/slurm info lists no cluster)")
    return clusters


def _progress(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def run_sections(plan: Plan, sections: list[str], command: str) -> list[str]:
    """Measure each section and write its results file; returns the sections that failed
    (their previous results files are left as they were)."""
    clusters: list = []
    if NEEDS_TESTBED & set(sections):
        from tests.integration.workload import testbed_clusters

        clusters = testbed_clusters()
    failed = []
    for name in sections:
        _progress(f"{name} ...")
        started = time.monotonic()
        try:
            section_plan, data = MEASURES[name](plan, clusters)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        path = results.write(name, command=command, receiver=RECEIVER_OF[name],
                             plan=section_plan, data=data, took_s=time.monotonic() - started)
        _progress(f"{name} took {time.monotonic() - started:.0f} s: {path}")
    return failed


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m tests.bench.all",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, help="runs behind each median (default 5; 2 --quick)")
    ap.add_argument("--quick", action="store_true", help="fewer runs and smaller loads")
    ap.add_argument("--idle-window", type=float, help="seconds of idling per run (default 60)")
    ap.add_argument("--only", help=f"comma-separated sections of {','.join(SECTIONS)}")
    args = ap.parse_args(args_in)
    sections = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    plan = make_plan(args)
    lock = bool(NEEDS_TESTBED & set(sections))
    command = results.command_line("tests.bench.all", args_in, lock=lock)
    failed = run_sections(plan, [s for s in SECTIONS if s in sections], command)
    out = render.write()
    _progress(f"wrote {out}")
    if failed:
        _progress(f"failed sections (results files unchanged): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
