"""Time bounds for ``sacct --starttime/--endtime``.

sacct reads its bounds as local wall-clock time (``YYYY-MM-DDTHH:MM:SS``) and resolves an
ambiguous time (the repeated hour when daylight saving ends) as it likes. A window bound
must never be read later (start) or earlier (end) than meant, or jobs fall between two
windows; so an ambiguous bound is widened by the size of the clock change. Overlap between
windows is harmless: runs are identified by (cluster, jobId, startTime).
"""

from __future__ import annotations

import os
from datetime import datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

_FMT = "%Y-%m-%dT%H:%M:%S"


def local_zone() -> tzinfo:
    """The zone Slurm's clients use: $TZ, else /etc/localtime, else UTC."""
    name = os.environ.get("TZ", "").lstrip(":")
    try:
        if name:
            return ZoneInfo(name)
        path = Path("/etc/localtime")
        if path.exists():
            with path.open("rb") as fh:
                return ZoneInfo.from_file(fh)
    except (OSError, ValueError):
        pass
    return ZoneInfo("UTC")


def _readings(wall: datetime, tz: tzinfo) -> tuple[float, float]:
    """Both epoch readings of a naive wall-clock time (equal unless it is ambiguous)."""
    first = wall.replace(tzinfo=tz, fold=0).timestamp()
    second = wall.replace(tzinfo=tz, fold=1).timestamp()
    return min(first, second), max(first, second)


def sacct_bound(ts: float, tz: tzinfo, *, is_start: bool) -> str:
    """Wall-clock text for ``ts`` that sacct cannot read as later (start) / earlier (end)."""
    wall = datetime.fromtimestamp(int(ts), tz).replace(tzinfo=None)
    low, high = _readings(wall, tz)
    if is_start and high > int(ts):
        wall = datetime.fromtimestamp(int(ts) - (high - low), tz).replace(tzinfo=None)
    elif not is_start and low < int(ts):
        wall = datetime.fromtimestamp(int(ts) + (high - low), tz).replace(tzinfo=None)
    return wall.strftime(_FMT)


def wall_readings(text: str, tz: tzinfo) -> tuple[int, ...]:
    """Epoch readings of a wall-clock text as scontrol prints it (two when ambiguous)."""
    try:
        wall = datetime.strptime(text, _FMT)
    except ValueError:
        return ()
    low, high = _readings(wall, tz)
    return (int(low),) if low == high else (int(low), int(high))


def parse_when(spec: str, now: float) -> float:
    """``2h``, ``30m``, ``1d``, ``90s`` ago; ``now``; ``@EPOCH``; or an ISO time (local)."""
    spec = spec.strip()
    if spec == "now":
        return now
    if spec.startswith("@"):
        return float(spec[1:])
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    if spec and spec[-1] in units and spec[:-1].replace(".", "", 1).isdigit():
        return now - float(spec[:-1]) * units[spec[-1]]
    try:
        parsed = datetime.fromisoformat(spec)
    except ValueError:
        raise ValueError(
            f"cannot read time {spec!r}: use 2h, 30m, 1d, now, @EPOCH or 2026-11-21T10:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=local_zone())
    return parsed.timestamp()
