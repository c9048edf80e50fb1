"""tests/bench/render.py: BENCHMARKS.md is written from measurements alone, every section
renders, and a failed or skipped section says so instead of breaking the file."""

from __future__ import annotations

from tests.bench.all import Plan
from tests.bench.render import document

META = {"command": "flock L .venv/bin/python -m tests.bench.all", "date": "D", "commit": "c0ffee",
        "cpus": "2", "python": "3.11", "kernel": "k", "took": 600.0}


def _run(events: int, seconds: float) -> dict:
    return {"events": events, "seconds": seconds, "rss_mb": 41, "maxrss_mb": 61, "pending": 0,
            "rejected": 0}


def results() -> dict:
    idle = {"calls": {"sacct": 1, "scontrol": 1, "squeue": 1}, "jobs": 0}
    busy = {"scripts": {"calls": {"sacct": 2, "scontrol": 2, "squeue": 1}, "jobs": 10},
            "no_scripts": {"calls": {"sacct": 1, "scontrol": 2, "squeue": 1}, "jobs": 10}}
    lat = {"start": [0.2] * 9 + [3.0], "end": [0.1] * 10, "start_slurm": [0.8] * 10,
           "end_slurm": [0.7] * 10, "unannounced": []}
    return {
        "parse": {"jobs": 10_000, "rows": [{"version": "22.05", "size": 27e6,
                                             "times": [1.2, 1.3, 1.25]}]},
        "pipeline": {"workers": 16, "small": {"jobs": 10_000, "runs": [_run(20_000, 20.0)]},
                     "large": {"jobs": 100_000, "runs": [_run(200_000, 250.0)]}},
        "nats": {"events": 5000, "rates": {"core": [2000.0, 2100.0], "jetstream": [1800.0]}},
        "cycles": {"tasks": 10, "rows": [{"version": "24.11.5", "idle": [idle, idle],
                                          "busy": [busy]}]},
        "memory": {"rows": [{"version": "24.11.5", "rss": [38.0, 38.5]}]},
        "idle-cpu": {"window": 120.0, "poll": 60, "runs": [[{
            "version": "24.11.5", "window": 120.2, "cpu_s": 0.6, "children_s": 0.3,
            "rss_mb": 40.0, "exit": 0}]]},
        "hook": {"jobs": 10, "rows": [{"version": "26.05.5", "lat": lat}], "pairs": 50,
                 "wall_version": "22.05.8", "hook_s": 0.016, "bare_s": 0.013},
    }


def test_every_figure_comes_from_the_results():
    text = document(Plan(runs=5), results(), META)
    assert text.startswith("# Benchmarks")
    assert META["command"] in text and "median is over 5 runs" in text
    assert "| 1,000 events/s" in text or "1,000 events/s |" in text  # 20,000 / 20 s
    assert "| 800 |" in text  # 200,000 events / 250 s, 100k jobs: below the target
    assert "**no**" in text  # ... and the summary says so
    assert "0.50 %" in text  # 0.6 CPU s over 120.2 s
    assert "1.23x" in text  # hook 16 ms / bare 13 ms
    assert "**120 s**" in text
    assert "3 (sacct 1, scontrol 1, squeue 1; 0 jobs in the window)" in text
    assert "Not run" not in text and "failed" not in text


def test_failed_and_skipped_sections_are_named():
    r = results()
    r["hook"] = {"error": "TimeoutError: not all delivered", "took": 3.0}
    del r["nats"]
    text = document(Plan(runs=2, quick=True), r, META)
    assert "--quick" in text
    assert "**This section failed**: `TimeoutError: not all delivered`" in text
    assert "## NATS publish rate (issue 5)\n\nNot run" in text
