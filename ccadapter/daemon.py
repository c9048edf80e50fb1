"""The daemon's loop: routines on their own intervals, delivery in its own thread.

Routines are plain callables (the reconcilers' ``run_once``); ``add_routine`` is the
extension point for site-specific ones. A routine that fails is logged and tried again at
its next turn; it never stops the others. Delivery wakes as soon as a routine enqueued
something, so a job reaches cc-backend within a cycle, not a cycle later.

Each deliverer (the outbox to cc-backend; the NATS notifications of what cc-backend took)
drains in a thread of its own, so a NATS outage never slows REST delivery; what one of them
delivered wakes the others.

Where one daemon serves several clusters (``slurmClusters``), a routine may belong to a
cluster: each cluster's routines run in a thread of their own (its *lane*), one after the
other as in the main loop, so a cluster whose Slurm hangs or fails for minutes (every command
running into ``slurmCommandTimeout``) delays its own cycles only. Lanes come and go with
their clusters (:meth:`Daemon.add_routine`, :meth:`Daemon.remove_cluster`). The routines of
no cluster -- all of them in the default mode -- run in the main loop, as before.
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


# How long a stopping daemon waits for a lane's cycle in flight (a Slurm command that hangs
# is killed after slurmCommandTimeout; what a cut cycle leaves is repeated by the next one).
LANE_JOIN = 30.0


@dataclass
class Routine:
    name: str
    fn: Callable[[], Any]
    interval: float
    next_at: float = 0.0  # 0: run at start, not one interval later
    last_ok: float | None = None
    last_error: str | None = None
    cluster: str | None = None  # runs in this cluster's lane; None: in the main loop
    retry: float | None = None  # after a failure, run again this soon (None: interval)
    retired: bool = False  # its cluster is no longer served

    @property
    def label(self) -> str:
        """How logs name it: ``slurm-window``, or ``slurm-window[CLUSTER]``."""
        return self.name if self.cluster is None else f"{self.name}[{self.cluster}]"


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
        self._lock = threading.Lock()  # self.routines and self._lanes
        self._lanes: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._running = False

    def add_routine(self, fn: Callable[[], Any], interval: float, name: str | None = None, *,
                    cluster: str | None = None, retry: float | None = None) -> None:
        """``cluster``: run it in that cluster's lane (started now if the daemon runs).
        ``retry``: after a failure, try again after this many seconds instead of
        ``interval``."""
        routine = Routine(name or getattr(fn, "__name__", "routine"), fn, interval,
                          cluster=cluster, retry=retry)
        with self._lock:
            self.routines.append(routine)
            if self._running and cluster is not None and cluster not in self._lanes:
                self._start_lane(cluster)

    def remove_cluster(self, cluster: str) -> None:
        """Stop running ``cluster``'s routines; its lane ends after the cycle in flight."""
        with self._lock:
            for routine in self.routines:
                if routine.cluster == cluster:
                    routine.retired = True
            self.routines = [r for r in self.routines if r.cluster != cluster]
            lane = self._lanes.pop(cluster, None)
        if lane is not None:
            lane[1].set()

    def _of(self, cluster: str | None) -> list[Routine]:
        with self._lock:
            return [r for r in self.routines if r.cluster == cluster]

    @property
    def deliverer(self) -> Deliverer:
        """The outbox's own deliverer (the first); the others drain queues beside it."""
        return self.deliverers[0][1]

    def add_deliverer(self, deliverer: Deliverer, name: str) -> None:
        self.deliverers.append((name, deliverer))

    def stop(self) -> None:
        self.stopping.set()
        self.wake_delivery()
        with self._lock:
            for _, wake in self._lanes.values():
                wake.set()

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
        with self._lock:
            self._running = True
            for cluster in dict.fromkeys(r.cluster for r in self.routines if r.cluster):
                self._start_lane(cluster)
        try:
            while not self.stopping.is_set():
                self.run_due()
                if self.heartbeat:
                    self.heartbeat()
                wait = self._until_due(self._of(None))
                if self.heartbeat_interval:
                    wait = min(wait, self.heartbeat_interval)
                self.stopping.wait(max(0.05, wait))
        finally:
            self.stop()
            for sender in senders:
                sender.join()
            with self._lock:
                lanes = [thread for thread, _ in self._lanes.values()]
            for lane in lanes:
                lane.join(LANE_JOIN)

    def run_due(self, cluster: str | None = None) -> None:
        """The due routines of ``cluster``'s lane (None: the main loop's), here and now."""
        for routine in self._of(cluster):
            if self.stopping.is_set():
                return
            if not routine.retired and self.clock() >= routine.next_at:
                self._run(routine)

    def _until_due(self, routines: list[Routine]) -> float:
        if not routines:
            return self.idle_delivery_wait
        return min(r.next_at for r in routines) - self.clock()

    def _start_lane(self, cluster: str) -> None:
        """Under ``self._lock``."""
        wake = threading.Event()
        thread = threading.Thread(target=self._lane, args=(cluster, wake),
                                  name=f"lane-{cluster}", daemon=True)
        self._lanes[cluster] = (thread, wake)
        thread.start()

    def _lane(self, cluster: str, wake: threading.Event) -> None:
        while not self.stopping.is_set():
            wake.clear()
            mine = self._of(cluster)
            if not mine:
                return  # the cluster is no longer served
            self.run_due(cluster)
            wake.wait(max(0.05, self._until_due(mine)))

    def _run(self, routine: Routine) -> None:
        started = self.clock()
        try:
            summary = routine.fn()
        except Exception as exc:  # a failing routine must not stop the others
            routine.last_error = f"{type(exc).__name__}: {exc}"
            log.error("%s failed: %s", routine.label, routine.last_error)
        else:
            routine.last_ok = time.time()
            routine.last_error = None
            log.info("%s: %s (%.2f s)", routine.label, summary, self.clock() - started)
        wait = routine.interval
        if routine.last_error is not None and routine.retry is not None:
            wait = routine.retry
        routine.next_at = started + wait
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
