"""BENCHMARKS.md's burst section (issue 47) from tests/bench/results/burst.json."""

from __future__ import annotations

from typing import Any

from tests.bench.burst import JOB_RPCS

Doc = dict[str, Any]
RPCS_PER_JOB = 1.0  # the target, every leg
USER_P99 = 1.10  # a user's squeue/sbatch p99 with the daemon over the no-daemon leg's
START_P50 = 0.25  # seconds, at 20 starts/s


def _legs(doc: Doc) -> dict[str, dict[str, dict]]:
    return {p: {leg["name"]: leg for leg in legs}
            for p, legs in doc["data"]["products"].items()}


def added(leg: dict, base: dict | None) -> dict[str, int]:
    """The product's RPCs in a leg: the leg's minus the same leg's without a daemon."""
    base_rpcs = base["rpcs"] if base else {}
    return {k: max(0, v - base_rpcs.get(k, 0)) for k, v in leg["rpcs"].items()
            if v - base_rpcs.get(k, 0) > 0}


def per_job(leg: dict, base: dict | None, family: bool = False) -> float:
    rpcs = added(leg, base)
    n = sum(v for k, v in rpcs.items() if not family or k in JOB_RPCS)
    return n / leg["jobs"] if leg["jobs"] else 0.0


def _ms(d: dict, key: str) -> str:
    return "—" if d.get(key) is None else f"{d[key]:.0f} ms"


def _s(d: dict, key: str) -> str:
    return "—" if not d or d.get(key) is None else f"{d[key]:.2f} s"


def sum_burst(doc: Doc) -> list[list[str]]:
    legs = _legs(doc)
    ours, none = legs.get("ccadapter", {}), legs.get("none", {})
    worst = max((per_job(leg, none.get(n), True), n) for n, leg in ours.items())
    return [[f"slurmctld job RPCs per job under a burst ({doc['data']['release']}, "
             f"{doc['plan']['queued']:,} queued), worst leg",
             f"{worst[0]:.2f} ({worst[1]})", f"≤ {RPCS_PER_JOB:g}", "—",
             "✅" if worst[0] <= RPCS_PER_JOB else "❌"]]


def sec_burst(doc: Doc) -> str:
    plan, data = doc["plan"], doc["data"]
    legs = _legs(doc)
    none, ours = legs.get("none", {}), legs.get("ccadapter", {})
    out = [f"Slurm {data['release']} ({data['cluster']}, 16 nodes of 8 CPUs), "
           f"{plan['queued']:,} jobs queued (eligible, waiting in a DOWN partition), one "
           "product at a time: legs `array` (a "
           f"{plan['tasks']:,}-task array, each task 1 s), `cancel` ({plan['cancel']} running "
           "tasks cancelled at once) and `steady` "
           f"({plan['rate']:g} jobs/s for {plan['steady']:g} s). RPCs are slurmctld's own "
           "counts (`sdiag`) over the leg, the product's being the leg's minus the same leg "
           "without a daemon; *job RPCs* are the job questions (show job, batch script, "
           "the dump of every job, the step list). A user (`ccuser`, no job queued) runs "
           "`squeue --me` and `sbatch -H` every second of the leg. Start and stop latency: "
           "from the hook wrapper's stamp to cc-backend's answer.", "",
           "| leg | product | jobs | job RPCs per job | all RPCs per job | dump of every "
           "job | slurmctld CPU | squeue --me p50 / p99 | sbatch p50 / p99 | start p50 | "
           "stop p50 | wrong runs |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in ("array", "cancel", "steady"):
        for product, got in (("none", none), ("ccadapter", ours)):
            leg = got.get(name)
            if leg is None:
                continue
            base = none.get(name) if product != "none" else None
            mine = added(leg, base) if base else {}
            out.append(
                f"| {name} | {product} | {leg['jobs']:,} | "
                + (f"{per_job(leg, base, True):.2f} | {per_job(leg, base):.2f} | "
                   f"{mine.get('REQUEST_JOB_INFO', 0)} | " if base else "— | — | — | ")
                + f"{leg['ctld_cpu_s']:.1f} s | {_ms(leg['squeue_ms'], 'p50')} / "
                f"{_ms(leg['squeue_ms'], 'p99')} | {_ms(leg['sbatch_ms'], 'p50')} / "
                f"{_ms(leg['sbatch_ms'], 'p99')} | {_s(leg['start_s'], 'p50')} | "
                f"{_s(leg['stop_s'], 'p50')} | "
                + (f"{len(leg['problems'])} |" if base else "— |"))
    out += ["", "ccadapter's RPCs by type, per leg (the leg's minus the no-daemon leg's):", ""]
    for name, leg in ours.items():
        mine = added(leg, none.get(name))
        out.append(f"- `{name}`: " + ", ".join(f"{k} {v:,}" for k, v in sorted(mine.items())))
    for product, why in data.get("not_run", {}).items():
        out += ["", f"{product} was not run: {why}."]
    out += ["", *data.get("notes", [])]
    return "\n".join(out) + "\n"
