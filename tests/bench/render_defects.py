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


def _plateau(days: list[dict], keep_days: int) -> list[dict]:
    """The days after the first ``keep_days + 1``, when every kind of row is kept for as
    long as it ever is: the file no longer grows with the days run."""
    return [d for d in days if d["day"] > keep_days + 1] or days[-1:]


def sum_outbox_size(doc: Doc) -> list[Row]:
    plan, days = doc["plan"], doc["data"]["days"]
    flat = _plateau(days, plan["keep_s"] // 86400)
    top, low = max(d["outbox_mb"] for d in flat), min(d["outbox_mb"] for d in flat)
    grows = (top - low) / low if low else 0.0
    return [[f"outbox file over {plan['days']} days at {plan['per_day']:,} jobs/day",
             f"{top:.0f} MB at most from day {flat[0]['day']} ({grows:+.0%} across those days)",
             "flat after the 7 days kept", "— (keeps retries in memory)",
             "✅" if grows < 0.05 else "❌"]]


def sec_outbox_size(doc: Doc) -> str:
    plan, days = doc["plan"], doc["data"]["days"]
    keep = plan["keep_s"] // 86400
    flat = _plateau(days, keep)
    top = max(d["outbox_mb"] for d in flat)
    per_event = top * 1e6 / max(d["events"] for d in flat)
    out = ["The outbox file through a simulated month of a site's jobs (issue 35, item 11), "
           f"{plan['per_day']:,} jobs a day, each started and stopped an hour later, node "
           f"states every minute, start bodies with a {plan['script_bytes']:,}-byte batch "
           "script, compaction hourly as the daemon runs it. Every event is kept as a small "
           f"row for {keep} days (`slurmQueryMaxSpan`: what a window may ask again), a start's "
           "body while its run runs and an hour after its stop (what a resend of a lost stop "
           "needs), and freed pages go back to the file system. So the file grows for "
           f"{keep + 1} days and then stays put: **{top:.0f} MB at {plan['per_day']:,} "
           f"jobs/day** (about {per_event:.0f} bytes per event kept); it scales with jobs a "
           "day, not with the days run.", "",
           "| day | outbox file | events kept |", "| --- | --- | --- |"]
    for d in days:
        out.append(f"| {d['day']} | {d['outbox_mb']:.1f} MB | {d['events']:,} |")
    return "\n".join(out) + "\n"
