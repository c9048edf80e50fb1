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

With controller failover a ``gate`` says whether this daemon is the one that works
(:mod:`ccadapter.daemon.control`): routines added with ``gated=True`` (the reconcilers) run only
while it is open, and all of them at once when it opens (the catch-up of a takeover).
Delivery is never gated: what the outbox holds is owed whatever the role. The gate is the
daemon's, not a lane's: with slurmClusters the daemon beside the slurmctld in control works
for every cluster it serves, and a gate that opens wakes every lane.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ccadapter.daemon.deliverer import Deliverer
from ccadapter.errors import CcAdapterError, Stopped
from ccadapter.report.loggate import LogGate
from ccadapter.runtime.stopflag import StopFlag

# The name the loop logged under before it moved into the package: `--log-level
# ccadapter.daemon=debug` (the line of every cycle) and the scale benchmark name it.
log = logging.getLogger("ccadapter.daemon")


# How long a stopping daemon waits for a lane's cycle in flight (a Slurm command that hangs
# is killed after slurmCommandTimeout; what a cut cycle leaves is repeated by the next one).
LANE_JOIN = 30.0
# The main loop's longest sleep: a stop asked by a signal (which only sets a flag) is seen
# within this.
STOP_POLL = 1.0
# Seconds between two lines of what the daemon did (the journal at the default level: one
# line per cycle or per delivered event would bury what an operator looks for).
SUMMARY_EVERY = 600.0
# The longest pause between two delivery passes that failed (the outbox cannot record).
PAUSE_MAX = 60.0


@dataclass
class Activity:
    """What happened since the last summary line; counted from the main loop, the lanes
    and the delivery threads (its lock guards the counts)."""

    delivered: int = 0
    rejected: int = 0
    retried: int = 0
    cycles: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # routine label -> failed cycles
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def deliveries(self, delivered: int, rejected: int, retried: int) -> None:
        with self.lock:
            self.delivered += delivered
            self.rejected += rejected
            self.retried += retried

    def cycle(self, label: str, ok: bool) -> None:
        with self.lock:
            self.cycles += 1
            if not ok:
                self.failed[label] = self.failed.get(label, 0) + 1

    def line(self, seconds: float) -> str:
        """The summary since the last one, and the counts start over."""
        with self.lock:
            failed = ", ".join(f"{k} {n}" for k, n in sorted(self.failed.items())) or "none"
            text = (f"in the last {seconds / 60:.0f} min: {self.delivered} event(s) delivered, "
                    f"{self.rejected} rejected, {self.retried} left for a later try; "
                    f"{self.cycles} cycles, failed: {failed}")
            self.delivered = self.rejected = self.retried = self.cycles = 0
            self.failed = {}
        return text


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
    gated: bool = False  # runs only while the daemon's gate is open

    @property
    def label(self) -> str:
        """How logs name it: ``slurm-window``, or ``slurm-window[CLUSTER]``."""
        return self.name if self.cluster is None else f"{self.name}[{self.cluster}]"


class Daemon:
    """The main loop, the lanes, the gate and the delivery threads, which share one lock,
    one stopping event and the routines' list (see the module docstring)."""

    def __init__(self, deliverer: Deliverer, clock: Callable[[], float] = time.monotonic,
                 idle_delivery_wait: float = 1.0,
                 progress: Callable[[], None] | None = None,
                 wait: Callable[[threading.Event, float], object] = threading.Event.wait,
                 stop_flag: StopFlag | None = None) -> None:
        """``clock`` and ``wait`` (until the event is set or the timeout passes) pace the
        routines of the main loop and the lanes; a test passes a clock that ``wait``
        advances, and :meth:`run` with ``max_cycles``, and needs no real time.
        ``stop_flag``: the stop a signal asks for, which the routines and their Slurm
        commands read too (:mod:`ccadapter.runtime.stopflag`)."""
        self.deliverers: list[tuple[str, Deliverer]] = [("delivery", deliverer)]
        self.clock = clock
        self.wait = wait
        self.idle_delivery_wait = idle_delivery_wait
        self.routines: list[Routine] = []
        self.stopping = threading.Event()
        self._wakes: list[threading.Event] = []
        self.on_cycle: Callable[[Routine], None] | None = None
        # Told of every pass of the main loop and every routine's start and end: systemd's
        # watchdog is fed while the daemon moves (ccadapter.runtime.watchdog).
        self.progress = progress or (lambda: None)
        self._lock = threading.Lock()  # self.routines, self._lanes and the gate's last state
        self._lanes: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._running = False
        self.gate: Callable[[], bool] = lambda: True
        self._gate_was_open = True
        self._main_wake = threading.Event()
        self.stop_flag = stop_flag or StopFlag()  # set by a signal handler too
        self.activity = Activity()
        self.summary_every = SUMMARY_EVERY
        self._summarized = clock()

    def add_routine(self, fn: Callable[[], Any], interval: float, name: str | None = None, *,
                    cluster: str | None = None, retry: float | None = None,
                    gated: bool = False) -> None:
        """``cluster``: run it in that cluster's lane (started now if the daemon runs).
        ``retry``: after a failure, try again after this many seconds instead of
        ``interval``. ``gated``: run it only while :attr:`gate` is open."""
        routine = Routine(name or getattr(fn, "__name__", "routine"), fn, interval,
                          cluster=cluster, retry=retry, gated=gated)
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

    def run_soon(self, name: str) -> None:
        """Run the routine ``name`` now rather than at its turn (safe from any thread)."""
        with self._lock:
            for routine in self.routines:
                if routine.name == name:
                    routine.next_at = 0.0
            self._wake_lanes()
        self._main_wake.set()

    def _of(self, cluster: str | None) -> list[Routine]:
        with self._lock:
            return [r for r in self.routines if r.cluster == cluster]

    @property
    def deliverer(self) -> Deliverer:
        """The outbox's own deliverer (the first); the others drain queues beside it."""
        return self.deliverers[0][1]

    def add_deliverer(self, deliverer: Deliverer, name: str) -> None:
        self.deliverers.append((name, deliverer))

    def stop_on_signals(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
                        ) -> None:
        """Stop at these signals. The handler only stores a flag, which the main loop reads
        within :data:`STOP_POLL`: a handler runs in the main thread between two bytecodes,
        perhaps while that thread holds a lock the stop would take (``self._lock``, an
        Event's), and would wait for itself for ever."""
        def asked(signum: int, frame: object) -> None:
            self.stop_flag.set()

        for sig in signals:
            signal.signal(sig, asked)

    def stop(self) -> None:
        self.stop_flag.set()
        self.stopping.set()
        self._main_wake.set()
        self.wake_delivery()
        with self._lock:
            self._wake_lanes()

    def wake_delivery(self) -> None:
        """Deliver now: something was enqueued outside the routines (the fast path)."""
        for wake in self._wakes:
            wake.set()

    def run(self, max_cycles: int | None = None) -> None:
        """Until :meth:`stop` (or ``max_cycles`` passes of the main loop): in-flight work is
        finished, then it returns."""
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
        cycles = 0
        try:
            while not self.stopping.is_set() and not self.stop_flag():
                self.progress()
                self.run_due()
                self._summarize()
                cycles += 1
                if max_cycles is not None and cycles >= max_cycles:
                    break
                wait = min(self._until_due(self._runnable(None)), STOP_POLL)
                self.wait(self._main_wake, max(0.05, wait))
                self._main_wake.clear()
        finally:
            self.stop()
            for sender in senders:
                sender.join()
            with self._lock:
                lanes = [thread for thread, _ in self._lanes.values()]
            for lane in lanes:
                lane.join(LANE_JOIN)

    def _summarize(self) -> None:
        """Every ``summary_every`` seconds, one line of what the daemon did."""
        now = self.clock()
        if now - self._summarized >= self.summary_every:
            log.info("%s", self.activity.line(now - self._summarized))
            self._summarized = now

    def run_due(self, cluster: str | None = None) -> None:
        """The due routines of ``cluster``'s lane (None: the main loop's), here and now."""
        for routine in self._of(cluster):
            if self.stopping.is_set() or self.stop_flag():
                return
            if routine.retired or (routine.gated and not self._gate_open()):
                continue
            if self.clock() >= routine.next_at:
                self._run(routine)

    def _runnable(self, cluster: str | None) -> list[Routine]:
        """``cluster``'s routines that may run now (the gated ones only while it is open).
        Asks the gate at each pass of the main loop, even with no gated routine there
        (slurmClusters): a gate the control routine opened wakes the lanes at once."""
        is_open = self._gate_open()
        return [r for r in self._of(cluster) if not r.gated or is_open]

    def _until_due(self, routines: list[Routine]) -> float:
        if not routines:
            return self.idle_delivery_wait
        return min(r.next_at for r in routines) - self.clock()

    def _gate_open(self) -> bool:
        """The gate, asked anew for each routine: the routine before may have opened it.
        When it opens, every gated routine is due at once, in every lane (safe from any
        thread: the first that sees it open makes them due)."""
        is_open = self.gate()
        with self._lock:
            if is_open and not self._gate_was_open:
                for routine in self.routines:
                    if routine.gated:
                        routine.next_at = 0.0
                self._wake_lanes()
            self._gate_was_open = is_open
        return is_open

    def _wake_lanes(self) -> None:
        """Under ``self._lock``."""
        for _, wake in self._lanes.values():
            wake.set()

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
            if not self._of(cluster):
                return  # the cluster is no longer served
            self.run_due(cluster)
            self.wait(wake, max(0.05, self._until_due(self._runnable(cluster))))

    def _run(self, routine: Routine) -> None:
        self.progress()
        started = self.clock()
        try:
            summary = routine.fn()
        except Stopped as exc:  # the daemon stops: what is left runs at the next start
            log.info("%s: %s", routine.label, exc)
            return
        except Exception as exc:  # a failing routine must not stop the others
            routine.last_error = f"{type(exc).__name__}: {exc}"
            log.error("%s failed: %s", routine.label, routine.last_error)
        else:
            routine.last_ok = time.time()
            routine.last_error = None
            # a line per cycle at debug only: the journal gets the summary (_summarize)
            log.debug("%s: %s (%.2f s)", routine.label, summary, self.clock() - started)
        self.activity.cycle(routine.label, routine.last_error is None)
        wait = routine.interval
        if routine.last_error is not None and routine.retry is not None:
            wait = routine.retry
        routine.next_at = started + wait
        self.progress()
        self.wake_delivery()
        if self.on_cycle:
            self.on_cycle(routine)

    def _deliver_loop(self, deliverer: Deliverer, wake: threading.Event) -> None:
        drain(deliverer, wake, [w for w in self._wakes if w is not wake], self.stopping,
              self.idle_delivery_wait, self.activity)


def drain(deliverer: Deliverer, wake: threading.Event, others: list[threading.Event],
          stopping: threading.Event, idle_wait: float, activity: Activity) -> None:
    """A delivery thread: delivers at once when started, then whenever woken or
    ``idle_wait`` passed, and once more when stopping (a pass that ends before its first
    batch then). What it delivered wakes the ``others`` (e.g. the NATS notifications of
    what REST delivered). A pass that fails (the outbox cannot record: a full disk) is tried
    again after a pause that doubles up to :data:`PAUSE_MAX`, said when it starts and once a
    minute, not woken early: the deliverer holds the answers it could not record, and sends
    nothing until they are."""
    pause = 0.0
    said = LogGate()
    while True:
        wake.clear()
        try:
            stats = deliverer.run_once(stopping=stopping.is_set)
        except Exception as exc:  # CcAdapterError, e.g. the outbox cannot record
            pause = min(PAUSE_MAX, max(idle_wait, 2 * pause))
            if not isinstance(exc, CcAdapterError):
                log.exception("delivery failed; tried again in %.0f s", pause)
            elif said.allow("paused"):
                log.error("delivery paused: %s; tried again in %.0f s, then less often "
                          "(up to every %.0f s)", exc, pause, PAUSE_MAX)
            if stopping.is_set():
                return
            stopping.wait(pause)
            continue
        if pause:
            log.info("delivery resumed")
            pause = 0.0
        activity.deliveries(stats.delivered, stats.rejected, stats.retried)
        if stopping.is_set():
            return
        if stats.delivered:
            for other in others:
                other.set()
        else:
            wake.wait(idle_wait)
