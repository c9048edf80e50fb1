"""Where the daemon reads the time and how it waits, in one object handed down by
:func:`ccadapter.daemon.build.build`.

The daemon's behaviour over hours and days (retention, backoffs, lost-stop checks, the
unreadable records' hourly questions, the window's bounds) follows the wall clock, and its
routines are paced by the monotonic one. A site lives for months; a test cannot. Passing
a clock that runs faster (and a ``wait`` that sleeps the matching real time) lets the
month-of-life benchmark (tests/bench/life.py) run the unchanged daemon through 30 days in
half an hour. Timeouts of I/O (a Slurm command, an HTTP request) stay in real time: they
bound what a real peer takes, not what the site's calendar says.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    now: Callable[[], float] = time.time  # wall clock (epoch seconds)
    monotonic: Callable[[], float] = time.monotonic  # pacing of the routines
    wait: Callable[[threading.Event, float], object] = threading.Event.wait


SYSTEM = Clock()
