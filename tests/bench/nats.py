"""Benchmark of NATS publishing (issue 5): messages/s from the outbox to a local nats-server.

A backlog of start+stop events built from real recorded jobs (tests.bench.delivery) is
drained through the daemon's own path (Deliverer + NatsDelivery + NatsPublisher) to a
nats-server on 127.0.0.1, on core NATS (publish + flush) and on JetStream (acknowledged,
Nats-Msg-Id). Every run starts a fresh server; the stream is checked to hold every event.

Run: .venv/bin/python -m tests.bench.all --only nats
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from ccadapter.daemon.deliverer import Deliverer
from ccadapter.notify.nats import NatsOptions, NatsPublisher
from ccadapter.notify.nats_delivery import NatsDelivery, Subjects
from ccadapter.outbox import Outbox
from tests.bench.delivery import daemon_workers, fill_outbox
from tests.natsserver import NatsServer, add_stream, stream_messages


def one_run(tmp: Path, n_events: int, jetstream: bool) -> float:
    box_path = tmp / "outbox.sqlite"
    fill_outbox(box_path, n_events)
    with NatsServer(tmp / "nats", jetstream=jetstream) as server:
        if jetstream:
            add_stream(server.url)
        pub = NatsPublisher(NatsOptions(url=server.url, jetstream=jetstream))
        pub.start()
        while not pub.connected:
            time.sleep(0.02)
        box = Outbox(box_path)
        deliverer = Deliverer(box.queue, NatsDelivery(pub, "bench", Subjects("jobs")),
                              workers=daemon_workers())
        started = time.perf_counter()
        done = 0
        while done < n_events:
            stats = deliverer.run_once()
            if not stats.delivered and time.perf_counter() - started > 600:
                raise RuntimeError(f"{done} of {n_events} events published in 600 s")
            done += stats.delivered
        elapsed = time.perf_counter() - started
        if jetstream:
            assert len(stream_messages(server.url)) == n_events
        deliverer.close()
        pub.close()
        box.close()
    return n_events / elapsed


def rates(runs: int, n_events: int, progress: bool = False) -> dict[str, list[float]]:
    """messages/s per run, core NATS and JetStream alternately."""
    out: dict[str, list[float]] = {"core": [], "jetstream": []}
    for i in range(runs):  # alternate, so that machine noise hits both alike
        for mode in out:
            with tempfile.TemporaryDirectory(prefix="ccadapter-bench-nats-") as tmp:
                out[mode].append(one_run(Path(tmp), n_events, mode == "jetstream"))
        if progress:
            print(f"run {i + 1}: core {out['core'][-1]:.0f}/s, "
                  f"jetstream {out['jetstream'][-1]:.0f}/s", flush=True)
    return out


if __name__ == "__main__":
    from tests.bench.all import main

    sys.exit(main(["--only", "nats", *sys.argv[1:]]))
