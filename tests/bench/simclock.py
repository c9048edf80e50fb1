"""A site's clock, running ``factor`` times faster than real time, shared by the processes
of the month-of-life run (tests/bench/life.py): the driver, the simulated Slurm that
answers by it, and the daemon, which gets it as its :class:`ccadapter.runtime.clock.Clock`.

The clock is a file of four doubles (the real monotonic instant and the site time it maps
to, the factor, and a step added to the wall clock alone), mapped into each process:
CLOCK_MONOTONIC is the same for every process of the host, so each computes the same site
time without talking to the others. The driver steps the daemon's wall clock (the "clock
set back 5 minutes" incident) by rewriting the step; Slurm's own times never step.
"""

from __future__ import annotations

import mmap
import struct
import threading
import time
from pathlib import Path

from ccadapter.runtime.clock import Clock

_LAYOUT = struct.Struct("dddd")  # real0, site0, factor, step


class SimClock:
    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("r+b") as fh:
            self._map = mmap.mmap(fh.fileno(), _LAYOUT.size)

    @classmethod
    def create(cls, path: Path, site0: float, factor: float) -> SimClock:
        path.write_bytes(_LAYOUT.pack(time.monotonic(), site0, factor, 0.0))
        return cls(path)

    @property
    def factor(self) -> float:
        return _LAYOUT.unpack_from(self._map)[2]

    def site(self) -> float:
        """Site time (epoch seconds), never stepped: Slurm's clock and the workload's."""
        real0, site0, factor, _ = _LAYOUT.unpack_from(self._map)
        return site0 + (time.monotonic() - real0) * factor

    def now(self) -> float:
        """The daemon's wall clock: site time plus the step."""
        real0, site0, factor, step = _LAYOUT.unpack_from(self._map)
        return site0 + (time.monotonic() - real0) * factor + step

    def step(self, seconds: float) -> None:
        real0, site0, factor, step = _LAYOUT.unpack_from(self._map)
        _LAYOUT.pack_into(self._map, 0, real0, site0, factor, step + seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Until ``event`` is set or ``seconds`` of site time passed."""
        return event.wait(max(0.0, seconds) / self.factor)

    def sleep_until(self, site_time: float) -> None:
        left = (site_time - self.site()) / self.factor
        if left > 0:
            time.sleep(left)

    def real_seconds(self, site_seconds: float) -> float:
        return site_seconds / self.factor

    def as_clock(self) -> Clock:
        """The daemon's clock: wall time with the step, pacing by site time."""
        return Clock(now=self.now, monotonic=self.site, wait=self.wait)
