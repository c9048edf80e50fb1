"""BENCHMARKS.md sections of issue 35 (what a site meets after hours and days): the figures
the fixes of its defects rest on. Rendered by :mod:`tests.bench.render`, which lists them."""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
Row = list[str]


def sum_energy_archive(doc: Doc) -> list[Row]:
    runs = doc["data"]["runs"]
    worst = max(r["max"] for r in runs)
    biggest = max(r["burst"] for r in runs)
    return [[f"energy edit taken after its stop (real cc-backend, bursts up to {biggest:,})",
             f"max {worst:.2f} s", "ccadapter keeps trying ≥ 1 h", "— (sends no energy)",
             "✅" if worst < 3600 else "❌"]]


def sec_energy_archive(doc: Doc) -> str:
    plan, runs = doc["plan"], doc["data"]["runs"]
    out = ["How long after a stop the real cc-backend 1.5.4 takes `PATCH /api/jobs/edit_meta/` "
           "(issue 35, item 4). It answers 500 until its archiver has written the stopped "
           "job's archive, in the background after `stop_job`'s 200. Each burst of jobs is "
           "started, then stopped 8 at a time (as the daemon's workers send), each stop "
           f"followed by its edit, asked again every {plan['poll_s']:g} s until it is taken; "
           "the figure is the time from the stop's 200 to the edit's 200. The test bed's "
           "server (internal metric store, file archive) archives fast; a site whose "
           "archiver loads metric data from elsewhere takes longer, which is why ccadapter "
           "keeps asking an edit with its own backoff for an hour after the stop "
           "(`ENERGY_PATIENCE`) before it rejects it.", "",
           "| stops at once | edits taken | answered 500 first | p50 | p95 | p99 | max |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        out.append(f"| {r['burst']:,} | {r['taken']:,} | {r['answers'].get('500', 0):,} | "
                   f"{r['p50']:.3f} s | {r['p95']:.3f} s | {r['p99']:.3f} s | "
                   f"{r['max']:.3f} s |")
    return "\n".join(out) + "\n"
