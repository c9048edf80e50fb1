from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from ccadapter.slurm.timefmt import parse_when, sacct_bound, wall_readings

BERLIN = ZoneInfo("Europe/Berlin")


def at(y, mo, d, h, mi, fold=0):
    return datetime(y, mo, d, h, mi, tzinfo=BERLIN, fold=fold).timestamp()


def readings(text):
    return wall_readings(text, BERLIN)


@pytest.mark.parametrize("ts", [
    at(2026, 10, 25, 2, 30, fold=0),  # first 02:30 (CEST), repeated an hour later
    at(2026, 10, 25, 2, 30, fold=1),  # second 02:30 (CET)
    at(2026, 10, 25, 1, 59),
    at(2026, 3, 29, 3, 0),  # just after the spring gap
    at(2026, 3, 29, 1, 59),
    at(2026, 7, 1, 12, 0),
])
def test_bounds_never_narrow_the_window_across_dst(ts):
    start = sacct_bound(ts, BERLIN, is_start=True)
    end = sacct_bound(ts, BERLIN, is_start=False)
    # However sacct reads an ambiguous wall time, start <= ts <= end.
    assert max(readings(start)) <= ts
    assert min(readings(end)) >= ts


def test_unambiguous_bounds_are_exact():
    ts = at(2026, 7, 1, 12, 0)
    assert sacct_bound(ts, BERLIN, is_start=True) == "2026-07-01T12:00:00"
    assert sacct_bound(ts, BERLIN, is_start=False) == "2026-07-01T12:00:00"


def test_parse_when():
    now = 1_800_000_000.0
    assert parse_when("2h", now) == now - 7200
    assert parse_when("30m", now) == now - 1800
    assert parse_when("1d", now) == now - 86400
    assert parse_when("now", now) == now
    assert parse_when("@123", now) == 123
    assert parse_when("2026-01-01T00:00:00+00:00", now) == 1767225600
    with pytest.raises(ValueError, match="cannot read time"):
        parse_when("yesterday-ish", now)
