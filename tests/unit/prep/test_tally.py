"""A flood of drops is counted in full and said in a few log lines."""

import logging

from ccadapter.prep.messages import DropReason
from ccadapter.prep.tally import HookTally


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_reason_is_said_at_once_then_once_a_minute_with_its_count(caplog):
    clock = Clock()
    metrics: list[str] = []
    tally = HookTally(on_drop=metrics.append, clock=clock, wall=lambda: 5.0, started=1.0)
    caplog.set_level(logging.INFO)
    for i in range(1000):
        tally.dropped(DropReason.INVALID, f"not JSON: {i}")
        tally.dropped(DropReason.TIMEOUT, "no complete message within 1 s")
        clock.now += 0.01  # 10 s in all
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # one per reason so far
    assert "not a hook message" in lines[0] and "not JSON: 0" in lines[0]
    clock.now += 50
    tally.dropped(DropReason.INVALID, "not JSON: last")
    (line,) = [r.getMessage() for r in caplog.records][2:]
    assert line.startswith("1000 hook messages dropped in 60 s") and "not JSON: last" in line
    assert len(metrics) == 2001 and set(metrics) == {"invalid", "timeout"}
    snap = tally.snapshot()
    assert snap == {"since": 1.0, "at": 5.0, "received": 0,
                    "dropped": {"invalid": 1001, "timeout": 1000}, "unknownJobs": {}}


def test_unknown_jobs_are_counted_by_cluster_and_said_once_a_minute(caplog):
    clock = Clock()
    counted: list[str] = []
    tally = HookTally(on_unknown=counted.append, clock=clock)
    caplog.set_level(logging.INFO)
    tally.unknown("c1", [7, 8, 9])
    tally.unknown("c1", [10])
    tally.unknown("c2", [])
    (line,) = [r.getMessage() for r in caplog.records]
    assert "3 job(s) of cluster c1" in line and "7, 8, 9" in line
    assert counted == ["c1"] * 4
    assert tally.snapshot()["unknownJobs"] == {"c1": 4}


def test_received_is_counted_for_status_and_metrics():
    seen: list[str] = []
    tally = HookTally(on_received=seen.append)
    tally.received("c1")
    tally.received("c2")
    assert seen == ["c1", "c2"] and tally.snapshot()["received"] == 2
