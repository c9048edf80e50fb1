"""The outbox's queries by id lists keep a bounded set of statement texts, so sqlite3's
prepared-statement cache (128 per connection) does not grow the heap cycle after cycle.

Found in the scale benchmark (issue 11): a daemon's RSS rose by about 2 MB at a time, in
the cycles that asked the outbox about a different number of runs than before."""

from __future__ import annotations

import random
import re
from pathlib import Path

from ccadapter.outbox import NewEvent, Outbox
from ccadapter.outbox.store import BATCH_LENGTHS, batches


def test_batches_keep_every_id_in_order_in_a_few_lengths():
    for n in (1, 7, 8, 9, 64, 65, 511, 512, 513, 1500):
        ids = list(range(100, 100 + n))
        got = list(batches(ids))
        assert all(len(b) in BATCH_LENGTHS for b in got), n
        flat = [i for b in got for i in b]
        assert sorted(set(flat)) == ids and flat == sorted(flat)
        assert len(got) == -(-n // BATCH_LENGTHS[-1])
    assert list(batches([])) == []


def _outbox(tmp_path: Path, runs: int) -> Outbox:
    box = Outbox(tmp_path / "outbox.sqlite", clock=lambda: 1_000_000.0)
    box.enqueue([NewEvent("c", j, 100, "start", {"jobId": j, "startTime": 100}, rich=True)
                 for j in range(1, runs + 1)])
    return box


def test_queries_by_many_ids_use_a_few_statement_texts(tmp_path):
    box = _outbox(tmp_path, 2000)
    lengths: set[int] = set()
    in_list = re.compile(r"IN \(([^()]*)\)")

    def seen(sql: str) -> None:
        for m in in_list.finditer(sql):
            lengths.add(m[1].count(",") + 1)

    box.store._db.set_trace_callback(seen)
    rng = random.Random(5)
    for _ in range(60):
        ids = rng.sample(range(1, 2500), rng.randint(1, 1200))
        runs = [(j, 100, False) for j in ids]
        details, starts = box.needs("c", runs)
        assert details == starts == {j for j in ids if j > 2000}  # a padded id changes nothing
        assert box.known_starts([(j, 100) for j in ids], "c") == {(j, 100) for j in ids
                                                                   if j <= 2000}
        assert set(box.start_deliveries("c", [(j, 100) for j in ids])) == {
            (j, 100) for j in ids if j <= 2000}
    box.store._db.set_trace_callback(None)
    box.close()
    assert lengths and lengths <= set(BATCH_LENGTHS)


def _rss_mb() -> float:
    text = Path("/proc/self/status").read_text()
    return int(text.split("VmRSS:")[1].split()[0]) / 1024


def test_a_varying_number_of_runs_does_not_grow_the_heap(tmp_path):
    """300 cycles of 1 to 500 runs each: before the padding, +6 MB (one prepared statement
    per distinct length, up to 128 kept); now well under 2 MB."""
    box = _outbox(tmp_path, 30_000)
    rng = random.Random(7)
    box.needs("c", [(j, 100, True) for j in range(1, 600)])  # warm: the three texts exist
    before = _rss_mb()
    for _ in range(300):
        ids = rng.sample(range(1, 30_000), rng.randint(1, 500))
        box.needs("c", [(j, 100, True) for j in ids])
    grown = _rss_mb() - before
    box.close()
    assert grown < 2.0, f"RSS grew {grown:.1f} MB over 300 queries"
