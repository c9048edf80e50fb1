"""Before and after a change that should not change speed (issue 31: the layout): the
pipeline, the CI-sized scale profile and the hook benchmarks of two commits, in one session,
each from a clean checkout of its commit and with that commit's own benchmark code.

    flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.regression \\
        --before REV [--after REV]

Per benchmark the two commits run one after the other (before, then after), so that the
machine's drift over the session falls on both alike. The benchmarks run in their small
form: ``tests.bench.all --quick --only pipeline`` (2 runs of 2,000 and 20,000 jobs into the
real cc-backend, its ceiling beside them), ``tests.bench.all --quick --only hook``, and
``tests.bench.scale`` in the size of tests/integration/test_scale_live.py (16 nodes, 2,000
queued, 50 running, 2 jobs/s). What each printed stays in the checkouts' results files;
their headline figures go to ``tests/bench/results/regression-<benchmark>.json`` (one per
benchmark, since each names its receiver) for BENCHMARKS.md.

Run as root with the test bed up (with the hook) and the cc-backend binary built.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench import results
from tests.bench.receivers import CC_BACKEND, STANDIN
from tests.integration.scale_bed import NODES, QUEUED_JOBS, RATE, RUNNING

median = statistics.median

# the benchmark, the results file it writes in its checkout, and its command there
SCALE_ARGS = ["--sizes", f"0,{QUEUED_JOBS}", "--nodes", str(NODES), "--running", str(RUNNING),
              "--rate", str(RATE), "--duration", "120", "--anchor-runs", "1"]
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "pipeline": ("pipeline", ["-m", "tests.bench.all", "--quick", "--only", "pipeline"]),
    "hook": ("hook", ["-m", "tests.bench.all", "--quick", "--only", "hook"]),
    "scale": ("scale", ["-m", "tests.bench.scale", *SCALE_ARGS]),
}
RECEIVER = {"pipeline": CC_BACKEND, "hook": STANDIN, "scale": STANDIN}


def _pipeline(doc: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key in ("small", "large"):
        rows = doc["data"][key]
        out[key] = {"jobs": rows[0]["jobs"],
                    "events_per_s": median(r["events_per_s"] for r in rows),
                    "ceiling_events_per_s": median(r["ceiling_events_per_s"] for r in rows),
                    "ratio": median(r["ratio"] for r in rows),
                    "jobs_per_s": median(r["jobs_per_s"] for r in rows),
                    "parse_jobs_per_s": median(r["parse_jobs_per_s"] for r in rows),
                    "peak_rss_mb": max(r["peak_rss_mb"] for r in rows)}
    return out


def _hook(doc: dict[str, Any]) -> dict[str, Any]:
    data = doc["data"]
    starts = [x for row in data["rows"] for x in row["lat"]["start_prolog"]]
    ends = [x for row in data["rows"] for x in row["lat"]["end_epilog"]]
    return {"start_from_prolog_p50_s": median(starts), "end_from_epilog_p50_s": median(ends),
            "samples": len(starts) + len(ends),
            "unannounced": sum(len(row["lat"]["unannounced"]) for row in data["rows"]),
            "hook_s": data["hook_s"], "bare_s": data["bare_s"],
            "hook_ratio": data["hook_s"] / data["bare_s"]}


def _scale(doc: dict[str, Any]) -> dict[str, Any]:
    data = doc["data"]
    levels = {str(lv["queued"]): {"cpu_share": lv["cpu_share"],
                                  "rss_peak_mb": lv["rss_peak_mb"],
                                  "start_from_prolog_p50_s":
                                      lv["latency"]["from_prolog"]["p50"]}
              for lv in data["levels"]}
    return {"levels": levels, "lost": data["count"]["lost"],
            "duplicated": data["count"]["duplicated"], "ran": data["count"]["ran"]}


SUMMARY: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "pipeline": _pipeline, "hook": _hook, "scale": _scale}


def checkout(rev: str, where: Path) -> tuple[Path, str]:
    """A clean checkout of ``rev`` (a detached git worktree); its short commit id."""
    subprocess.run(["git", "-C", str(results.REPO), "worktree", "add", "--detach", "-f",
                    str(where), rev], check=True, capture_output=True, stdin=subprocess.DEVNULL)
    commit = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                            check=True, capture_output=True, text=True).stdout.strip()
    return where, commit


def measure(tree: Path, bench: str) -> dict[str, Any]:
    """Run one benchmark in a checkout, with this interpreter: the checkout's own code
    (``python -m`` and the daemons it starts import from the working directory first)."""
    section, args = COMMANDS[bench]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, stdin=subprocess.DEVNULL,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{bench} in {tree} exited {done.returncode}")
    doc = json.loads((tree / "tests" / "bench" / "results" / f"{section}.json").read_text())
    return {"took_s": round(time.monotonic() - started, 1), "date": doc["date"],
            "plan": doc["plan"], **SUMMARY[bench](doc)}


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m tests.bench.regression",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the commit before the change")
    ap.add_argument("--after", default="HEAD", help="the commit after it (default HEAD)")
    ap.add_argument("--only", default=",".join(COMMANDS),
                    help=f"comma-separated benchmarks of {','.join(COMMANDS)}")
    args = ap.parse_args(args_in)
    benches = [b for b in COMMANDS if b in args.only.split(",")]
    command = results.command_line("tests.bench.regression", args_in, lock=True)
    with tempfile.TemporaryDirectory(prefix="ccadapter-regression-") as tmp:
        trees = {label: checkout(rev, Path(tmp, label))
                 for label, rev in (("before", args.before), ("after", args.after))}
        try:
            for bench in benches:
                started = time.monotonic()
                data: dict[str, Any] = {}
                for label, (tree, commit) in trees.items():
                    print(f"{time.strftime('%H:%M:%S')} {bench}: {label} ({commit})",
                          file=sys.stderr, flush=True)
                    data[label] = {"commit": commit, **measure(tree, bench)}
                path = results.write(f"regression-{bench}", command=command,
                                     receiver=RECEIVER[bench],
                                     plan={"benchmark": bench,
                                           "command": ["python", *COMMANDS[bench][1]]},
                                     data=data, took_s=time.monotonic() - started)
                print(f"wrote {path}", file=sys.stderr, flush=True)
        finally:
            for tree, _ in trees.values():
                subprocess.run(["git", "-C", str(results.REPO), "worktree", "remove", "--force",
                                str(tree)], check=False, capture_output=True)
    from tests.bench import render

    print(f"wrote {render.write()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
