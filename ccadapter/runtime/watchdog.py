"""systemd's watchdog, fed while the daemon makes progress, not only while its main loop is free.

The main loop runs the reconcilers one after the other; one of them waiting for a Slurm that
does not answer (every command running into ``slurmCommandTimeout``, then tried again) holds
the loop for minutes. Pinging from the loop got such a daemon killed and restarted for a
slow Slurm, which a restart does not mend. So a thread of its own pings (:class:`Watchdog`),
as long as something moved in the last ``stall`` seconds (:class:`Liveness`): a routine began
or ended, a Slurm command or a cc-backend request ended, each bounded by its own timeout. A
stopped process (SIGSTOP) pings nothing at all; a daemon stuck for good stops moving, stops
pinging ``stall`` seconds later, and systemd restarts it ``WatchdogSec`` after that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Liveness:
    """When the daemon last moved; touched from any thread (a float store is atomic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last = clock()

    def touch(self, *_: object) -> None:
        """Progress (any arguments are ignored: it also serves as a callback)."""
        self.last = self.clock()

    def idle(self) -> float:
        """Seconds since the last progress."""
        return self.clock() - self.last


class Watchdog:
    """Sends ``ping()`` every ``interval`` seconds while ``liveness`` moved within
    ``stall`` seconds."""

    def __init__(self, ping: Callable[[], object], interval: float, stall: float,
                 liveness: Liveness) -> None:
        self.ping, self.interval, self.stall, self.liveness = ping, interval, stall, liveness
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            if self.liveness.idle() < self.stall:
                self.ping()
            if self._stop.wait(self.interval):
                return
