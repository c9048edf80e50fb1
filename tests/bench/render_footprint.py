"""BENCHMARKS.md's footprint section (issue 47) from tests/bench/results/footprint.json."""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
RSS_TARGET = 40.0  # MB, the daemon at rest
BASH_HOOK = "hook script, TCP socket (bash alone)"
PYTHON_FLOOR = "floor: python3 -I -S -c pass"


def _calls(doc: Doc) -> dict[str, dict]:
    return {c["name"]: c for c in doc["data"]["hook"]}


def sum_footprint(doc: Doc) -> list[list[str]]:
    data = doc["data"]
    calls = _calls(doc)
    hook, bare = calls[BASH_HOOK], calls[PYTHON_FLOOR]
    ours, theirs = data["daemon"]["ccadapter"], data["daemon"].get("cc-slurm-adapter", {})
    ratio = hook["cpu_ms"] / bare["cpu_ms"]
    rows = [[f"hook CPU per job (TCP socket, {data['release']}), against a bare Python "
             "interpreter's start",
             f"{hook['cpu_ms']:.1f} ms ({ratio:.2f}x of {bare['cpu_ms']:.1f} ms)", "< 1x", "—",
             "✅" if hook["cpu_ms"] < bare["cpu_ms"] else "❌"],
            ["daemon at rest, 0 queued: RSS / PSS", f"{ours['rss']:.1f} / {ours['pss']:.1f} MB",
             f"RSS ≤ {RSS_TARGET:g} MB", f"{theirs['rss']:.1f} / {theirs['pss']:.1f} MB"
             if theirs else "—", "✅" if ours["rss"] <= RSS_TARGET else "❌"]]
    if theirs:
        mine = ours["start_cpu_s"] + ours["idle_cpu_s"]
        go = theirs["start_cpu_s"] + theirs["idle_cpu_s"]
        rows.append([f"daemon CPU, start and {ours['idle_s']:g} s at rest, 0 queued",
                     f"{mine:.2f} s", f"≤ cc-slurm-adapter's ({go:.2f} s)", f"{go:.2f} s",
                     "✅" if mine <= go else "❌"])
    return rows


def sec_footprint(doc: Doc) -> str:
    data, plan = doc["data"], doc["plan"]
    out = [f"Slurm {data['release']} ({plan['cluster']}). **The hook**, one call, "
           f"{plan['runs']} of each variant run alternately: the child's CPU (user + "
           "system, from wait4) and wall time, medians, sending to the daemon's own "
           "server (which answers \"ok\" as the daemon does). The shipped "
           "`hooks/ccadapter-hook.sh` tells a TCP socket with bash's builtins alone (no "
           "program started); a UNIX socket it hands to the Python hook.", "",
           "| hook call | CPU | wall |", "| --- | --- | --- |"]
    out += [f"| {c['name']} | {c['cpu_ms']:.2f} ms | {c['wall_ms']:.2f} ms |"
            for c in data["hook"]]
    out += ["", f"**What slurmctld waits for**: from `sched: Allocate JobId=N` to "
            "`Configuration for JobId=N is complete` in slurmctld's log (millisecond "
            f"stamps), {plan['jobs']} jobs with each PrologSlurmctld, the real daemon "
            "listening:", "", "| PrologSlurmctld | jobs | p50 | max |", "| --- | --- | --- | --- |"]
    for name, p in data["prolog"].items():
        p50 = "—" if p["p50_ms"] is None else f"{p['p50_ms']:.0f} ms"
        top = "—" if p["max_ms"] is None else f"{p['max_ms']:.0f} ms"
        out.append(f"| {name} | {p['jobs']} | {p50} | {top} |")
    out += ["", f"**The daemon at rest**, 0 queued, polling every 10 s into its own real "
            f"cc-backend, {plan['idle']:g} s after it is ready; PSS counts a shared page "
            "once among the processes that map it, *own* is the PSS of its anonymous "
            "pages (heap, the interpreter's objects):", "",
            "| process | CPU to ready | CPU at rest | RSS | PSS | own (anonymous PSS) |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, d in data["daemon"].items():
        out.append(f"| {name} | {d['start_cpu_s']:.2f} s | {d['idle_cpu_s']:.2f} s | "
                   f"{d['rss']:.1f} MB | {d['pss']:.1f} MB | {d['pss_anon']:.1f} MB |")
    for name, f in data["floor"].items():
        out.append(f"| floor: {name} | — | — | {f['rss']:.1f} MB | {f['pss']:.1f} MB | "
                   f"{f['pss_anon']:.1f} MB |")
    out += ["", "Where the daemon's start goes (`python -X importtime -c \"import "
            "ccadapter.daemon.app\"`, each module's own time summed by package): "
            + ", ".join(f"{i['package']} {i['ms']:.0f} ms" for i in data["imports"]) + "."]
    return "\n".join(out) + "\n"
