"""Time bounds for ``sacct --starttime/--endtime``.

sacct reads its bounds as wall-clock time (``YYYY-MM-DDTHH:MM:SS``) in the zone it runs in,
which need not be the daemon's (a chroot without /etc/localtime, another host through
slurmCommandPrefix): the collector writes them in UTC and runs sacct with ``TZ=UTC0``
(:data:`ccadapter.slurm.formats.listing.LISTING_ENV`). In a zone with daylight saving sacct
resolves an ambiguous time (the repeated hour) as it likes; a window bound must never be read
later (start) or earlier (end) than meant, or jobs fall between two windows, so
:func:`sacct_bound` widens an ambiguous bound by the size of the clock change. Overlap between
windows is harmless: runs are identified by (cluster, jobId, startTime).
"""

from __future__ import annotations

import calendar
import os
import time
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_FMT = "%Y-%m-%dT%H:%M:%S"


def local_zone() -> tzinfo:
    """The zone Slurm's clients use, read as glibc reads it: $TZ, else /etc/localtime, else
    UTC. An empty TZ is UTC; a name zoneinfo does not know (a POSIX rule such as
    ``CET-1CEST,M3.5.0,M10.5.0/3``, or a name glibc takes for UTC) is asked of glibc itself."""
    name = os.environ.get("TZ")
    if name is None:
        try:
            with Path("/etc/localtime").open("rb") as fh:
                return ZoneInfo.from_file(fh)
        except (OSError, ValueError):
            return ZoneInfo("UTC")
    name = name.lstrip(":")
    if not name:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        time.tzset()
        return GlibcZone()


class GlibcZone(tzinfo):
    """The process's zone as the C library computes it (``time.localtime``/``mktime`` after
    ``tzset``): for TZ values zoneinfo cannot read, which Slurm's C clients read all the
    same. An ambiguous wall time (the repeated hour) has two instants; ``fold`` picks one,
    as for zoneinfo."""

    def _instants(self, dt: datetime) -> list[float]:
        wall = (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second)
        found = set()
        for isdst in (0, 1):
            t = time.mktime((*wall, 0, 0, isdst))
            if time.localtime(t)[:6] == wall:
                found.add(t)
        return sorted(found) or [time.mktime((*wall, 0, 0, -1))]

    def utcoffset(self, dt: datetime | None) -> timedelta:
        if dt is None:
            return timedelta(seconds=-time.timezone)
        instants = self._instants(dt)
        t = instants[-1] if dt.fold else instants[0]
        return timedelta(seconds=time.localtime(t).tm_gmtoff)

    def dst(self, dt: datetime | None) -> timedelta:
        if dt is None:
            return timedelta(0)
        return timedelta(hours=1) if time.localtime(self._instants(dt)[0]).tm_isdst > 0 \
            else timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return time.tzname[0]

    def fromutc(self, dt: datetime) -> datetime:
        t = calendar.timegm(dt.replace(tzinfo=None).timetuple())
        local = (dt.replace(tzinfo=None) + timedelta(seconds=time.localtime(t).tm_gmtoff))
        instants = self._instants(local)
        return local.replace(tzinfo=self, fold=int(len(instants) > 1 and t == instants[-1]))


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


def readings(text: str, tz: tzinfo) -> tuple[int, ...]:
    """Epoch readings of a time as scontrol prints it: an epoch (``SLURM_TIME_FORMAT=%s``,
    how the collector asks, so that the zone scontrol runs in cannot shift it), or, in
    text recorded without it, wall-clock time (two readings when ambiguous); () if unset."""
    epoch = text.strip()
    if epoch.isascii() and epoch.isdigit() and len(epoch) <= 12:
        return (int(epoch),) if int(epoch) else ()
    return wall_readings(text, tz)


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
