"""Benchmark: how long after a stop the real cc-backend 1.5.4 takes an energy edit (issue 35,
item 4).

cc-backend answers ``PATCH /api/jobs/edit_meta/`` with 500 until its archiver has written the
stopped job's archive (repository/job.go ``UpdateMetadata`` stores the value, then
pkg/archive ``UpdateMetadata`` needs the job's meta.json), which it does in the background
after ``stop_job`` answered 200. A burst of stops queues in the archiver: the last of them is
archived last. This starts ``burst`` jobs, then stops them all at once (8 at a time, as the
daemon's workers send), each followed by its edit, asked again every ``poll`` seconds until
it is taken, and keeps, per job, the seconds from its stop's 200 to the edit's 200.

The server is the test bed's build, with its defaults (commit worker 2 min, the internal
metric store, a file archive): a site whose archiver loads metric data from a remote store
takes longer, which is why ccadapter keeps trying an edit far longer than measured here
(``ccadapter.cc.rest_delivery.ENERGY_PATIENCE``).

Run: flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.energy_archive \\
         [--bursts 1,100,1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.bench import results
from tests.ccbackend import RECEIVER, CcBackend, Nodes

CLUSTER = "energybench"
NODES = Nodes(("e1", "e2"))


def _call(cc: CcBackend, method: str, path: str, body: dict) -> int:
    request = urllib.request.Request(cc.server_url + path, json.dumps(body).encode(),
                                     {"X-Auth-Token": cc.token,
                                      "Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def burst(cc: CcBackend, first_id: int, count: int, poll: float, limit: float) -> dict:
    """Start ``count`` jobs, stop them all at once, time each edit from its stop."""
    start_time = int(time.time()) - 600
    ids = range(first_id, first_id + count)
    with ThreadPoolExecutor(8) as pool:
        started = list(pool.map(lambda j: _call(cc, "POST", "/api/jobs/start_job/", {
            "jobId": j, "cluster": CLUSTER, "user": "bench", "project": "bench",
            "startTime": start_time, "numNodes": 1, "numHwthreads": 1,
            "resources": [{"hostname": "e1"}],
            # without metaData cc-backend 1.5.4 never takes an edit: UpdateMetadata copies
            # into the archive's nil map and panics (pkg/archive/archive.go), a 500
            "metaData": {"jobName": f"bench{j}"}}), ids))
        assert set(started) == {201}, started
        taken: dict[int, float] = {}
        answers: dict[int, int] = {}
        lock = threading.Lock()

        def stop_then_edit(job: int) -> None:
            status = _call(cc, "POST", "/api/jobs/stop_job/", {
                "jobId": job, "cluster": CLUSTER, "startTime": start_time,
                "stopTime": start_time + 300, "jobState": "completed"})
            assert status == 200, status
            stopped = time.monotonic()
            while time.monotonic() - stopped < limit:
                status = _call(cc, "PATCH", "/api/jobs/edit_meta/", {
                    "jobId": job, "cluster": CLUSTER, "startTime": start_time,
                    "payload": {"key": "energy", "value": "1234"}})
                with lock:
                    answers[status] = answers.get(status, 0) + 1
                if status == 200:
                    with lock:
                        taken[job] = time.monotonic() - stopped
                    return
                time.sleep(poll)

        list(pool.map(stop_then_edit, ids))
    delays = sorted(taken.values())

    def pct(q: float) -> float | None:
        return round(delays[min(len(delays) - 1, int(q * len(delays)))], 4) if delays else None

    return {"burst": count, "taken": len(taken), "answers": answers,
            "p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99), "max": pct(1.0)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", default="1,100,1000,5000")
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--limit", type=float, default=900.0)
    args = parser.parse_args(argv)
    began = time.monotonic()
    runs = []
    with tempfile.TemporaryDirectory(prefix="energy-archive-") as tmp, \
            CcBackend(Path(tmp) / "cc", {CLUSTER: NODES}, commit_interval=None) as cc:
        first = 1
        for count in (int(n) for n in args.bursts.split(",")):
            runs.append(burst(cc, first, count, args.poll, args.limit))
            first += count
            print(json.dumps(runs[-1]), flush=True)
    results.write("energy-archive", command=results.command_line(
        "tests.bench.energy_archive", lock=True), receiver=RECEIVER,
        plan={"bursts": args.bursts, "poll_s": args.poll, "limit_s": args.limit},
        data={"runs": runs}, took_s=time.monotonic() - began)


if __name__ == "__main__":
    main()
