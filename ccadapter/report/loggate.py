"""Say a repeated problem once a minute, not once per event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Keys kept before the ones said longer than ``every`` ago are dropped (problems keyed by a
# job id would otherwise be remembered for the daemon's life).
PRUNE_AT = 1000


class LogGate:
    """Says each distinct problem at once, then at most once per ``every`` seconds: a
    server that refuses us for a day must not write a line every two seconds."""

    def __init__(self, every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            if now - self._last.get(key, -1e9) < self.every:
                return False
            self._last[key] = now
            if len(self._last) > PRUNE_AT:  # keys of problems that stopped: forgotten
                self._last = {k: t for k, t in self._last.items() if now - t < self.every}
            return True
