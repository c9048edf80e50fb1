"""Memory with a long history to read (issue 11): a 60,000-run catch-up after a three-day
outage, and a 30-day ``ccadapter backfill``, both through the whole program with the
replayed Slurm of tests.bench.replay_slurm (the runs are copies of recorded 24.11 jobs; a
real slurmdbd with 60,000 runs would take the churn three and a half hours to fill).

    .venv/bin/python -m tests.bench.scale_catchup [--runs 60000] [--days 30]

Writes tests/bench/results/scale-history.json (about 30 minutes on the 2-core machine)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench import results
from tests.bench.delivery import (
    BENCH_CLUSTER,
    CHUNK_JOBS,
    _free_port,
    _outbox_counts,
    daemon_backlog,
    write_backlog,
)
from tests.bench.receivers import STANDIN, STANDIN_LATENCY, standin_process

DAY = 86400.0
OUTAGE_DAYS = 3  # the catch-up: lastRun this far back, cc-backend down meanwhile
# ``ccadapter ARGS`` that prints its own peak RSS when it exits: VmHWM of its own memory
# map. Not wait4's ru_maxrss: Linux carries that across exec from the forking parent (this
# benchmark, which holds the replayed history), and it counts the largest child too.
_PEAK_WRAPPER = (
    "import atexit, re, sys\n"
    "atexit.register(lambda: print('PEAK_RSS_KB', re.search(r'VmHWM:\\s+(\\d+)', "
    "open('/proc/self/status').read()).group(1), flush=True))\n"
    "sys.argv = ['ccadapter', *sys.argv[1:]]\n"
    "from ccadapter.__main__ import main\n"
    "main()\n")


def catch_up_run(n_runs: int) -> dict:
    """The daemon starts with lastRun three days back while cc-backend is down: it reads
    the outage in hourly slices (lastRun moves per slice, progress logged per slice), then
    cc-backend comes up and the backlog drains."""
    with tempfile.TemporaryDirectory(prefix="cccatchup-") as tmp:
        base = Path(tmp)
        write_backlog(base, n_runs, time.time())
        out = daemon_backlog(n_runs, base, lookback=OUTAGE_DAYS * DAY, receiver=STANDIN)
    out.pop("rss_enqueue_mb", None)
    out.pop("rss_drain_mb", None)
    return out


def backfill_run(days: int, n_runs: int) -> dict:
    """``ccadapter backfill --since {days}d`` with cc-backend up: every 6-hour chunk asks
    Slurm for its window, the first ones hand out the ``n_runs`` runs. Peak RSS of the
    process (wait4), its progress output, and the outbox it leaves."""
    with tempfile.TemporaryDirectory(prefix="ccbackfill-") as tmp:
        base = Path(tmp, "slurm")
        base.mkdir()
        write_backlog(base, n_runs, time.time())
        port = _free_port()
        cfg = Path(tmp, "config.json")
        cfg.write_text(json.dumps({
            "ccRestUrl": f"http://127.0.0.1:{port}", "ccRestJwt": "bench-token",
            "pidFilePath": f"{tmp}/daemon.pid", "lastRunPath": f"{tmp}/lastrun",
            "prepSockListenPath": f"{tmp}/daemon.sock", "stateDirectory": f"{tmp}/state",
            "slurmCommandPrefix": [sys.executable, "-m", "tests.bench.replay_slurm",
                                   str(base)],
            "slurmFetchJobScripts": False}))
        server = standin_process(STANDIN_LATENCY, BENCH_CLUSTER, port=port)
        try:
            t0 = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-c", _PEAK_WRAPPER, "backfill", "--config", str(cfg),
                 "--since", f"{days}d"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**os.environ, "TZ": "UTC"}, check=False)
            output = proc.stdout.decode("utf-8", "replace")
            took = time.monotonic() - t0
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
        counts = _outbox_counts(Path(tmp, "state", "outbox.sqlite"))
    if proc.returncode != 0:
        raise RuntimeError(f"backfill exited {proc.returncode}: {output[-2000:]}")
    want = {"start:delivered": n_runs, "stop:delivered": n_runs}
    if any(counts.get(k) != v for k, v in want.items()) or any(
            k.endswith(":rejected") for k in counts):
        raise RuntimeError(f"outbox after the backfill: {counts} (want {want})")
    peak = [int(line.split()[1]) for line in output.splitlines()
            if line.startswith("PEAK_RSS_KB ")]
    lines = [line for line in output.splitlines()
             if line.strip() and not line.startswith("PEAK_RSS_KB ")]
    return {"days": days, "runs": n_runs, "seconds": round(took, 1),
            "peak_rss_mb": round(peak[-1] / 1024, 1), "outbox": counts,
            "output_lines": len(lines), "output_tail": lines[-3:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.scale_catchup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=60_000)
    p.add_argument("--days", type=int, default=30, help="backfill range")
    args = p.parse_args(argv)
    started = time.monotonic()
    data = {"catch_up": catch_up_run(args.runs)}
    print(f"catch-up: {data['catch_up']['peak_rss_mb']:.1f} MB peak", file=sys.stderr)
    data["backfill"] = backfill_run(args.days, args.runs)
    print(f"backfill: {data['backfill']['peak_rss_mb']:.1f} MB peak", file=sys.stderr)
    path = results.write("scale-history", command=results.command_line(
        "tests.bench.scale_catchup", argv), receiver=STANDIN,
        plan={"runs": args.runs, "days": args.days, "chunk_jobs": CHUNK_JOBS,
              "lookback_days": OUTAGE_DAYS},
        data=data, took_s=time.monotonic() - started)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
