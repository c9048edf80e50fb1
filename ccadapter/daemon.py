"""The daemon's loop: routines on their own intervals, delivery in its own thread.

Routines are plain callables (the reconcilers' ``run_once``); ``add_routine`` is the
extension point for site-specific ones. A routine that fails is logged and tried again at
its next turn; it never stops the others. Delivery wakes as soon as a routine enqueued
something, so a job reaches cc-backend within a cycle, not a cycle later.

Each deliverer (the outbox to cc-backend; the NATS notifications of what cc-backend took)
drains in a thread of its own, so a NATS outage never slows REST delivery; what one of them
delivered wakes the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccadapter.delivery import Deliverer
from ccadapter.errors import CcAdapterError

log = logging.getLogger(__name__)


@dataclass
class Routine:
    name: str
    fn: Callable[[], Any]
    interval: float
    next_at: float = 0.0  # 0: run at start, not one interval later
    last_ok: float | None = None
    last_error: str | None = None


class Daemon:
    def __init__(self, deliverer: Deliverer, clock: Callable[[], float] = time.monotonic,
                 idle_delivery_wait: float = 1.0,
                 heartbeat: Callable[[], None] | None = None,
                 heartbeat_interval: float | None = None) -> None:
        self.deliverers: list[tuple[str, Deliverer]] = [("delivery", deliverer)]
        self.clock = clock
        self.idle_delivery_wait = idle_delivery_wait
        self.routines: list[Routine] = []
        self.stopping = threading.Event()
        self._wakes: list[threading.Event] = []
        self.on_cycle: Callable[[Routine], None] | None = None
        # Called from the main loop at least every heartbeat_interval (systemd's watchdog):
        # a stuck loop stops the pings and systemd restarts the daemon.
        self.heartbeat = heartbeat
        self.heartbeat_interval = heartbeat_interval

    def add_routine(self, fn: Callable[[], Any], interval: float, name: str | None = None) -> None:
        self.routines.append(Routine(name or getattr(fn, "__name__", "routine"), fn, interval))

    @property
    def deliverer(self) -> Deliverer:
        """The outbox's own deliverer (the first); the others drain queues beside it."""
        return self.deliverers[0][1]

    def add_deliverer(self, deliverer: Deliverer, name: str) -> None:
        self.deliverers.append((name, deliverer))

    def stop(self) -> None:
        self.stopping.set()
        self.wake_delivery()

    def wake_delivery(self) -> None:
        """Deliver now: something was enqueued outside the routines (the fast path)."""
        for wake in self._wakes:
            wake.set()

    def run(self) -> None:
        """Until :meth:`stop`: in-flight work is finished, then it returns."""
        self._wakes = [threading.Event() for _ in self.deliverers]
        senders = [threading.Thread(target=self._deliver_loop, args=(d, wake), name=name,
                                    daemon=True)
                   for (name, d), wake in zip(self.deliverers, self._wakes, strict=True)]
        for sender in senders:
            sender.start()
        try:
            while not self.stopping.is_set():
                self.run_due()
                if self.heartbeat:
                    self.heartbeat()
                wait = min(r.next_at for r in self.routines) - self.clock()
                if self.heartbeat_interval:
                    wait = min(wait, self.heartbeat_interval)
                self.stopping.wait(max(0.05, wait))
        finally:
            self.stop()
            for sender in senders:
                sender.join()

    def run_due(self) -> None:
        for routine in self.routines:
            if self.stopping.is_set():
                return
            if self.clock() >= routine.next_at:
                self._run(routine)

    def _run(self, routine: Routine) -> None:
        started = self.clock()
        try:
            summary = routine.fn()
        except Exception as exc:  # a failing routine must not stop the others
            routine.last_error = f"{type(exc).__name__}: {exc}"
            log.error("%s failed: %s", routine.name, routine.last_error)
        else:
            routine.last_ok = time.time()
            routine.last_error = None
            log.info("%s: %s (%.2f s)", routine.name, summary, self.clock() - started)
        routine.next_at = started + routine.interval
        self.wake_delivery()
        if self.on_cycle:
            self.on_cycle(routine)

    def _deliver_loop(self, deliverer: Deliverer, wake: threading.Event) -> None:
        while not self.stopping.is_set():
            wake.clear()
            try:
                stats = deliverer.run_once(stopping=self.stopping.is_set)
            except CcAdapterError as exc:  # e.g. the outbox cannot record: disk full
                log.error("delivery paused: %s; retrying", exc)
                stats = None
            except Exception:
                log.exception("delivery failed; retrying")
                stats = None
            if stats is not None and stats.delivered:
                for other in self._wakes:  # e.g. NATS notifications of what REST delivered
                    if other is not wake:
                        other.set()
            else:
                wake.wait(self.idle_delivery_wait)
