"""The daemon's loop: routines on their own intervals, delivery in its own thread.

Routines are plain callables (the reconcilers' ``run_once``); ``add_routine`` is the
extension point for site-specific ones. A routine that fails is logged and tried again at
its next turn; it never stops the others. Delivery wakes as soon as a routine enqueued
something, so a job reaches cc-backend within a cycle, not a cycle later.

Each deliverer (the outbox to cc-backend; the NATS notifications of what cc-backend took)
drains in a thread of its own, so a NATS outage never slows REST delivery; what one of them
delivered wakes the others.

With controller failover a ``gate`` says whether this daemon is the one that works
(:mod:`ccadapter.control`): routines added with ``gated=True`` (the reconcilers) run only
while it is open, and all of them at once when it opens (the catch-up of a takeover).
Delivery is never gated: what the outbox holds is owed whatever the role.
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
    gated: bool = False  # runs only while the daemon's gate is open


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
        self.gate: Callable[[], bool] = lambda: True
        self._gate_was_open = True
        self._main_wake = threading.Event()

    def add_routine(self, fn: Callable[[], Any], interval: float, name: str | None = None,
                    gated: bool = False) -> None:
        self.routines.append(Routine(name or getattr(fn, "__name__", "routine"), fn, interval,
                                     gated=gated))

    def run_soon(self, name: str) -> None:
        """Run the routine ``name`` now rather than at its turn (safe from any thread)."""
        for routine in self.routines:
            if routine.name == name:
                routine.next_at = 0.0
        self._main_wake.set()

    @property
    def deliverer(self) -> Deliverer:
        """The outbox's own deliverer (the first); the others drain queues beside it."""
        return self.deliverers[0][1]

    def add_deliverer(self, deliverer: Deliverer, name: str) -> None:
        self.deliverers.append((name, deliverer))

    def stop(self) -> None:
        self.stopping.set()
        self._main_wake.set()
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
                runnable = [r.next_at for r in self.routines if not r.gated or self._gate_open()]
                wait = min(runnable, default=self.clock() + 1.0) - self.clock()
                if self.heartbeat_interval:
                    wait = min(wait, self.heartbeat_interval)
                self._main_wake.wait(max(0.05, wait))
                self._main_wake.clear()
        finally:
            self.stop()
            for sender in senders:
                sender.join()

    def run_due(self) -> None:
        for routine in self.routines:
            if self.stopping.is_set():
                return
            if routine.gated and not self._gate_open():
                continue
            if self.clock() >= routine.next_at:
                self._run(routine)

    def _gate_open(self) -> bool:
        """The gate, asked anew for each routine: the routine before may have opened it.
        When it opens, every gated routine is due at once."""
        is_open = self.gate()
        if is_open and not self._gate_was_open:
            for routine in self.routines:
                if routine.gated:
                    routine.next_at = 0.0
        self._gate_was_open = is_open
        return is_open

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
