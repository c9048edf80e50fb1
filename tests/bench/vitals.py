"""What a long-running daemon's health is read from, the same way by the month-of-life run
(tests/bench/life.py) and the real-time soak (tests/bench/soak.py): its memory, descriptors,
threads and CPU from /proc, its outbox file's size and pending events from the file itself
(read-only: the daemon keeps writing), and how much it logged.

A leak shows as a slope of these figures over days, not as a value: the runs sample them at
fixed points and :func:`slope_per_week` turns the samples into the rate the targets bound.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.bench.scale_probe import cpu_seconds, status_mb


@dataclass(frozen=True)
class Vitals:
    rss_mb: float
    fds: int
    threads: int
    cpu_s: float  # the daemon's and its Slurm commands' user + system seconds so far
    outbox_mb: float  # the outbox database with its WAL
    pending: int  # events waiting for delivery
    log_lines: int  # lines in the daemon's log so far

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def read(pid: int, outbox: Path, log: Path) -> Vitals:
    """The figures of the daemon ``pid`` now (raises OSError/RuntimeError when it is gone)."""
    threads = int(Path(f"/proc/{pid}/status").read_text().split("Threads:")[1].split()[0])
    return Vitals(rss_mb=round(status_mb(pid, "VmRSS"), 2),
                  fds=len(os.listdir(f"/proc/{pid}/fd")), threads=threads,
                  cpu_s=round(cpu_seconds(pid), 2), outbox_mb=round(outbox_mb(outbox), 3),
                  pending=pending(outbox), log_lines=count_lines(log))


def outbox_mb(path: Path) -> float:
    total = 0
    for suffix in ("", "-wal"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            total += part.stat().st_size
    return total / 1e6


def pending(path: Path) -> int:
    """Events the outbox still has to deliver (-1: the file cannot be read now)."""
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return int(db.execute("SELECT count(*) FROM events WHERE status = 'pending'"
                                  ).fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return -1


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))


def slope_per_week(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (day, value) points, per 7 days (0 for fewer than 2 points)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return 7 * sum((x - mx) * (y - my) for x, y in points) / sxx
