"""The CI duration (issue 13, item 6): how long ``tests/run`` takes and how many tests it
runs, into tests/bench/results/ci.json, then BENCHMARKS.md is rendered again.

Time a run (its output is passed through and read for pytest's summary line)::

    .venv/bin/python -m tests.bench.ci_time -- tests/run -v -p no:cacheprovider

or read a CI log that holds pytest's summary (``=== 568 passed in 1292.37s ===``). A log
does not say how long the whole run took (venv, test bed, lint) nor on which commit: give
them when known, else the file records pytest's time and this checkout's commit::

    .venv/bin/python -m tests.bench.ci_time --from-log ci.log [--total-seconds 1500] \\
        [--commit abc1234]

The machine recorded is the one this runs on: read a log here only if CI ran here.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench import render, results

_SUMMARY = re.compile(r"^=+ (?P<counts>.*?) in (?P<seconds>[0-9.]+)s(?: \([0-9:]+\))? =+\s*$")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|"
                    r"warnings?)")
_RUN = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")


def parse_summary(text: str) -> dict[str, Any]:
    """Counts and seconds from pytest's summary lines; ValueError when there is none.

    tests/run runs two pytest sessions side by side (the deployment suite beside the rest),
    each deselecting the other's tests: the counts are summed, the deselected ones less
    those the other sessions ran, and ``pytest_s`` is the longest session's."""
    sessions = [m for line in text.splitlines() if (m := _SUMMARY.match(line.strip()))]
    if not sessions:
        raise ValueError("no pytest summary line (=== N passed in S s ===) in the output")
    counts: dict[str, Any] = {k: 0 for k in (*_RUN, "deselected")}
    for found in sessions:
        for n, what in _COUNT.findall(found["counts"]):
            key = {"error": "errors", "warning": "warnings"}.get(what, what)
            if key in counts:
                counts[key] += int(n)
    counts["tests"] = sum(counts[k] for k in _RUN)
    counts["deselected"] = max(0, counts["deselected"] - (len(sessions) - 1) * counts["tests"])
    counts["sessions"] = len(sessions)
    counts["pytest_s"] = max(float(found["seconds"]) for found in sessions)
    return counts


def timed(command: list[str]) -> tuple[str, float, int]:
    """Run ``command``, passing its output through; (output, seconds, exit code)."""
    started = time.monotonic()
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
    return "".join(lines), time.monotonic() - started, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.ci_time",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--from-log", type=Path, metavar="LOG", help="read a CI log, run nothing")
    ap.add_argument("--total-seconds", type=float, help="with --from-log: the run's wall time")
    ap.add_argument("--commit", help="with --from-log: the commit CI ran on")
    ap.add_argument("command", nargs="*", help="the command to time (after --)")
    args = ap.parse_args(argv)
    if bool(args.from_log) == bool(args.command):
        ap.error("give either --from-log LOG or -- COMMAND")
    if args.from_log:
        text, total, code, source = args.from_log.read_text(errors="replace"), \
            args.total_seconds, None, "log"
        command = results.command_line("tests.bench.ci_time", argv)
    else:
        text, total, code = timed(args.command)
        source = "timed"
        command = results.command_line("tests.bench.ci_time", ["--", *args.command])
    try:
        data = parse_summary(text)
    except ValueError as exc:
        print(f"ci_time: {exc}", file=sys.stderr)
        return 2
    data.update(total_s=total, returncode=code, source=source)
    results.write("ci", command=command, took_s=total or data["pytest_s"], receiver="none",
                  plan={"run": args.command or None,
                        "log": str(args.from_log) if args.from_log else None}, data=data,
                  machine_info={"commit": args.commit, "dirty": False} if args.commit else None)
    render.write()
    return 0 if code in (0, None) else code


if __name__ == "__main__":
    sys.exit(main())
