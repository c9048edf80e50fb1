"""BENCHMARKS.md's before/after sections (tests.bench.regression): one table per benchmark,
the two commits side by side with after / before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Doc = dict[str, Any]
Row = list[str]

# After / before beyond these is a regression worth a look (noise on a shared 2-core
# machine moves a quick run's figures by a tenth either way).
WORSE_RATE = 0.85  # events/s, jobs/s: after at least this share of before
WORSE_TIME = 1.2  # latencies, CPU, memory: after at most this multiple of before


def _ratio(before: float, after: float) -> str:
    return f"{after / before:.2f}x" if before else "—"


def _within_noise(before: float, after: float, higher_better: bool) -> bool:
    return after >= WORSE_RATE * before if higher_better else after <= WORSE_TIME * before


def _table(doc: Doc, rows: list[tuple[str, Callable[[dict], float], str, bool]]) -> str:
    """``rows``: the figure, how to read it from one side's data, its format, and whether
    more is better."""
    before, after = doc["data"]["before"], doc["data"]["after"]
    out = [f"| figure | before ({before['commit']}) | after ({after['commit']}) | "
           "after / before | within noise |", "| --- | --- | --- | --- | --- |"]
    for name, get, fmt, higher_better in rows:
        b, a = get(before), get(after)
        ok = _within_noise(b, a, higher_better)
        out.append(f"| {name} | {fmt.format(b)} | {fmt.format(a)} | {_ratio(b, a)} | "
                   f"{'yes' if ok else '**no**'} |")
    return "\n".join(out) + "\n"


def _regressions(doc: Doc, rows) -> int:
    before, after = doc["data"]["before"], doc["data"]["after"]
    return sum(1 for _, get, _, hb in rows if not _within_noise(get(before), get(after), hb))


def _pipeline_rows(doc: Doc) -> list:
    rows = []
    for key in ("small", "large"):
        jobs = doc["data"]["before"][key]["jobs"]
        rows += [
            (f"{jobs:,} jobs: events/s into cc-backend",
             lambda d, k=key: d[k]["events_per_s"], "{:,.0f}", True),
            (f"{jobs:,} jobs: share of the ceiling", lambda d, k=key: d[k]["ratio"],
             "{:.2f}x", True),
            (f"{jobs:,} jobs: enqueue, jobs/s", lambda d, k=key: d[k]["jobs_per_s"],
             "{:,.0f}", True),
            (f"{jobs:,} jobs: peak RSS", lambda d, k=key: d[k]["peak_rss_mb"], "{:.0f} MB",
             False),
        ]
    return rows


def _hook_rows(doc: Doc) -> list:
    return [("start, PrologSlurmctld to cc-backend (p50)",
             lambda d: d["start_from_prolog_p50_s"], "{:.3f} s", False),
            ("end, EpilogSlurmctld to cc-backend (p50)",
             lambda d: d["end_from_epilog_p50_s"], "{:.3f} s", False),
            ("hook wall time (median)", lambda d: d["hook_s"] * 1000, "{:.1f} ms", False),
            ("hook / bare interpreter", lambda d: d["hook_ratio"], "{:.2f}x", False)]


def _scale_rows(doc: Doc) -> list:
    rows = []
    for queued in sorted(doc["data"]["before"]["levels"], key=int):
        rows += [
            (f"{int(queued):,} queued: daemon CPU, share of a core",
             lambda d, q=queued: d["levels"][q]["cpu_share"] * 100, "{:.2f} %", False),
            (f"{int(queued):,} queued: peak RSS",
             lambda d, q=queued: d["levels"][q]["rss_peak_mb"], "{:.1f} MB", False),
            (f"{int(queued):,} queued: start from Prolog (p50)",
             lambda d, q=queued: d["levels"][q]["start_from_prolog_p50_s"], "{:.3f} s",
             False),
        ]
    return rows


ROWS = {"pipeline": _pipeline_rows, "hook": _hook_rows, "scale": _scale_rows}


def _bench(doc: Doc) -> str:
    return doc["plan"]["benchmark"]


def sec_regression(doc: Doc) -> str:
    bench = _bench(doc)
    rows = ROWS[bench](doc)
    text = (f"`{' '.join(doc['plan']['command'])}`, run in a clean checkout of each commit, "
            f"one after the other. A figure is within noise when after / before is at least "
            f"{WORSE_RATE:g}x for rates and at most {WORSE_TIME:g}x for times and memory.\n\n"
            + _table(doc, rows))
    if bench == "scale":
        d = doc["data"]
        text += ("\nEvery churn job reached cc-backend once: "
                 + "; ".join(f"{label} {d[label]['ran']:,} ran, {d[label]['lost']} lost, "
                             f"{d[label]['duplicated']} duplicated"
                             for label in ("before", "after")) + ".\n")
    return text


def sum_regression(doc: Doc) -> list[Row]:
    bench = _bench(doc)
    worse = _regressions(doc, ROWS[bench](doc))
    before, after = doc["data"]["before"]["commit"], doc["data"]["after"]["commit"]
    return [[f"{bench}: figures beyond noise, {after} against {before} (issue 31)", str(worse),
             "0", "—", "yes" if worse == 0 else "**no**"]]
