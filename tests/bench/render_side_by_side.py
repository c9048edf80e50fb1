"""BENCHMARKS.md section of issue 38: ccadapter beside cc-slurm-adapter on the same workload
(tests/bench/side_by_side.py). Rendered by :mod:`tests.bench.render`, which lists it."""

from __future__ import annotations

import re
from typing import Any

Doc = dict[str, Any]
Row = list[str]
OURS, THEIRS = "ccadapter", "cc-slurm-adapter"
STEADY_RSS_MB = 40.0  # issue 38's target for ccadapter's steady RSS


def workload_cpu(side: dict[str, Any]) -> float:
    """CPU seconds over the workload: the daemon's own and its Slurm commands'."""
    return side["cpu_self"] + side["cpu_children"]


def load_per_min(side: dict[str, Any], key: str) -> float:
    """RPCs per minute slurmctld (``ctld_rpcs``) or slurmdbd (``dbd_rpcs``) served during a
    leg: the workload's own (its driver reads Slurm every 2 s) plus the daemon's. The two
    products' legs ran the same workload and driver, so their difference is theirs; the
    leg with no daemon is shown beside them (less it, the figure is noise at this size:
    the driver's reads vary with how long the workload takes)."""
    return sum(side[key].values()) / max(side["minutes"], 1e-9)


def wrong_runs(side: dict[str, Any]) -> int:
    """Runs with at least one problem: a het job's component sent alone counts against its
    het job (the run Slurm has), not as a run of its own."""
    runs = set()
    for problem in side["problems"]:
        head, _, rest = problem.partition(": ")
        found = re.match(r"a component of het job (\d+)", rest)
        runs.add(found.group(1) if found else head.removeprefix("job "))
    return len(runs)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:,.0f} ms"


def _sizes(plan: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    asked = [int(s) for s in str(plan["sizes"]).split(",")]
    done = sorted({r["queued"] for r in runs})
    missing = [s for s in asked if s not in done]
    text = "Queue sizes measured: " + ", ".join(f"{s:,}" for s in done)
    if missing:
        text += (" (asked: " + ", ".join(f"{s:,}" for s in asked) + "; not measured: "
                 + ", ".join(f"{s:,}" for s in missing) + ")")
    commits: dict[str, list[int]] = {}
    for r in runs:
        if r.get("commit") and r["queued"] not in commits.setdefault(r["commit"], []):
            commits[r["commit"]].append(r["queued"])
    if len(commits) > 1:
        text += " Measured at: " + "; ".join(
            f"{', '.join(f'{q:,}' for q in qs)} queued at {c}" for c, qs in commits.items())
    return text + "."


def _tag(entry: dict[str, Any]) -> str:
    return f"{entry['queued']:,} queued, {'hook' if entry['hook'] else 'poll only'}"


def sum_side_by_side(doc: Doc) -> list[Row]:
    runs = doc["data"]["runs"]
    cpu = [(workload_cpu(r[OURS]), workload_cpu(r[THEIRS])) for r in runs]
    worst = max(ours / theirs for ours, theirs in cpu if theirs)
    whole = max((workload_cpu(r[OURS]) + r[OURS]["cpu_start"])
                / (workload_cpu(r[THEIRS]) + r[THEIRS]["cpu_start"]) for r in runs)
    rss = max(r[OURS]["rss_mb"] for r in runs)
    hooked = [r for r in runs if r["hook"]]
    lat = [(r[OURS]["start_p50"], r[THEIRS]["start_p50"]) for r in hooked
           if r[OURS]["start_p50"] is not None and r[THEIRS]["start_p50"] is not None]
    wrong = sum(wrong_runs(r[OURS]) for r in runs)
    theirs_wrong = sum(wrong_runs(r[THEIRS]) for r in runs)
    load = {key: [(load_per_min(r[OURS], key), load_per_min(r[THEIRS], key)) for r in runs]
            for key in ("ctld_rpcs", "dbd_rpcs")}
    rows = [
        ["side by side: runs with a wrong field (all sizes)", f"{wrong}",
         "≤ cc-slurm-adapter's", f"{theirs_wrong}", "✅" if wrong <= theirs_wrong else "❌"],
        ["side by side: workload CPU, ours / theirs (worst size)", f"{worst:.2f}x", "≤ 1x",
         "1x", "✅" if worst <= 1 else "❌"],
        ["side by side: CPU with the daemon's start, ours / theirs (worst size)",
         f"{whole:.2f}x", "≤ 1x", "1x", "✅" if whole <= 1 else "❌"],
        ["side by side: final RSS (worst size)", f"{rss:.1f} MB", f"≤ {STEADY_RSS_MB:.0f} MB",
         f"{max(r[THEIRS]['rss_mb'] for r in runs):.1f} MB",
         "✅" if rss <= STEADY_RSS_MB else "❌"],
    ]
    for key, daemon in (("ctld_rpcs", "slurmctld"), ("dbd_rpcs", "slurmdbd")):
        pairs = load[key]
        rows.append([f"side by side: {daemon} RPCs/min during the workload (every size and "
                     "mode, the benchmark's reads included)",
                     " / ".join(f"{o:,.0f}" for o, _ in pairs), "≤ cc-slurm-adapter's",
                     " / ".join(f"{t:,.0f}" for _, t in pairs),
                     "✅" if all(o <= t for o, t in pairs) else "❌"])
    if lat:
        rows.append(["side by side: Prolog to start_job p50 (worst size)",
                     _ms(max(o for o, _ in lat)), "≤ cc-slurm-adapter's",
                     _ms(max(t for _, t in lat)),
                     "✅" if all(o <= t for o, t in lat) else "❌"])
    return rows


def sec_side_by_side(doc: Doc) -> str:
    plan, runs = doc["plan"], doc["data"]["runs"]
    out = [f"ccadapter and cc-slurm-adapter (8101095, built from its source) on one Slurm "
           f"{plan['version']} cluster ({plan['cluster']}), each into its own real cc-backend "
           f"1.5.4, both polling every {plan['poll_s']} s, one after the other on the same "
           "workload: the test bed's 13 jobs (a 3-task array, a het job, GPU jobs, cancels, a "
           "timeout, an exclusive job) and a job requeued while it runs, beside a queue of "
           "held jobs, with the Prolog/Epilog hook (each product's own client, from the same "
           "wrapper) or without. Fields are compared with `sacct`'s parsable text and "
           "slurmctld's allocations, read by the benchmark. CPU is the daemon's and its Slurm "
           "commands' (/proc utime+stime, cutime+cstime) over the workload; *start* is what "
           "the daemon spent before it (ccadapter's Python start and first cycle: once per "
           "daemon start). Load is slurmctld's (`sdiag`) and slurmdbd's (`sacctmgr show "
           "stats`) RPC count per minute during the workload, the benchmark's own reads "
           "included (the same in every leg; the leg with no daemon says how many). "
           "Latency: from the moment slurmctld ran the hook wrapper to the answer cc-backend "
           "gave the start (stop).", "",
           _sizes(plan, runs), "",
           "| queue, mode | product | runs wrong | requeued job's 1st run | CPU workload "
           "(own + commands) | CPU start | RSS final (peak) | Prolog→start p50 / p95 | "
           "Epilog→stop p50 / p95 | slurmctld RPC/min | slurmdbd RPC/min |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        base = r["none"]
        out.append(f"| {_tag(r)} | no daemon | | | | | | | | "
                   f"{load_per_min(base, 'ctld_rpcs'):,.0f} | "
                   f"{load_per_min(base, 'dbd_rpcs'):,.0f} |")
        for name in (OURS, THEIRS):
            s = r[name]
            out.append(
                f"| {_tag(r)} | {name} | {wrong_runs(s)} of {s['runs']} | "
                f"{s['requeued_first_run']} | {workload_cpu(s):.2f} s ({s['cpu_self']:.2f} + "
                f"{s['cpu_children']:.2f}) | {s['cpu_start']:.2f} s | {s['rss_mb']:.1f} MB "
                f"({s['rss_peak_mb']:.1f}) | {_ms(s['start_p50'])} / {_ms(s['start_p95'])} | "
                f"{_ms(s['stop_p50'])} / {_ms(s['stop_p95'])} | "
                f"{load_per_min(s, 'ctld_rpcs'):,.0f} | "
                f"{load_per_min(s, 'dbd_rpcs'):,.0f} |")
    wrong = sorted({p for r in runs for p in r[THEIRS]["problems"]})
    if wrong:
        kinds = sorted({re.sub(r"\d+", "N", p.split(": ", 1)[1].split(" != ")[0]
                               .split(" {")[0]) for p in wrong if ": " in p})
        out += ["", "What cc-slurm-adapter held wrong, by kind (job ids as N): "
                + "; ".join(f"`{k}`" for k in kinds) + "."]
    ours = sorted({p for r in runs for p in r[OURS]["problems"]})
    if ours:
        out += ["", "What ccadapter held wrong: " + "; ".join(f"`{p}`" for p in ours) + "."]
    return "\n".join(out) + "\n"
