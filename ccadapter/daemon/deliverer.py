"""Drains a queue of the outbox with a bounded pool of workers.

Batch by batch: take the due events, deliver them in parallel, record every result in one
transaction. The next batch is taken and handed to the workers while one is answered, so
that they never wait for a batch's recording (a transaction synced to disk) nor for its
slowest request: two batches at most are in flight, answered and recorded in the order they
were taken. An event in flight is still pending in the outbox, so the next batch leaves it
out by its id, and the queue holds back whatever must follow it (a stop until its start was
delivered or rejected, a run's energy until its stop, a requeued job's next run until the
last one's events): the per-job order needs no locking here.

What "deliver" means is a function of one event: :class:`ccadapter.cc.rest_delivery.RestDelivery`
(cc-backend's REST API, with its 404 dance) or :class:`ccadapter.notify.nats_delivery.NatsDelivery`.
The same engine drains the outbox itself and its NATS notification queue.

A delivery that raises (a bug, or a body nothing expected) costs that event a retry with
its backoff and a log line, never the batch: the others' results are recorded as usual, so
one event cannot hold the outbox.

Answers that cannot be recorded (the outbox's disk is full) are kept here, with the batches
still in flight, until they can: their events count as in flight meanwhile and are never
sent again, and the run ends with the outbox's error, for the caller to back off
(:mod:`ccadapter.daemon.loop`). A crash loses only the memory of those answers: the events
are still pending on disk and go out again, answered 422 (delivered already).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ccadapter.errors import CcAdapterError
from ccadapter.model import EventKind
from ccadapter.outbox import DeliveryStatus, Event, Result

if TYPE_CHECKING:
    from ccadapter.cc.rest_delivery import RestDelivery
    from ccadapter.notify.nats_delivery import NatsDelivery

log = logging.getLogger(__name__)


class Queue(Protocol):
    """What the engine drains: an outbox queue (events for cc-backend, or NATS notifications)."""

    def due(self, limit: int = 256) -> list[Event]: ...

    def record(self, results: Iterable[Result]) -> None: ...

    def retry_now(self, ids: Iterable[int] | None = None) -> None: ...


@dataclass
class DeliveryStats:
    delivered: int = 0
    retried: int = 0
    rejected: int = 0

    def add(self, result: Result) -> None:
        if result.status == DeliveryStatus.DELIVERED:
            self.delivered += 1
        elif result.status == DeliveryStatus.REJECTED:
            self.rejected += 1
        else:
            self.retried += 1


@dataclass(frozen=True)
class _Batch:
    """Events handed to the workers, and their answers to come (one future each: a
    delivery never raises, :meth:`Deliverer._deliver_one` turns an exception into a
    retry)."""

    events: list[Event]
    futures: list[Future[Result]]


class Deliverer:
    def __init__(self, queue: Queue, deliver: Callable[[Event], Result], workers: int = 8,
                 batch: int = 256,
                 on_result: Callable[[Event, Result], None] | None = None) -> None:
        self.queue = queue
        self.deliver = deliver
        self.batch = batch
        self.on_result = on_result
        # Set by a batch in which nothing got through: the target is down and events wait
        # with growing delays (up to minutes). While it is set, a burst starts with one
        # event, a probe: the events enqueued meanwhile (a catch-up's thousands) are not
        # each sent once to a target that refuses them all, at the cost of CPU the
        # reconcilers need. The first success afterwards makes the events the outage held
        # back due at once (``_held_back``), so a backlog drains when the target is back,
        # not minutes later. An event the target answered "not yet" (an energy edit before
        # the job is archived: Result.waiting) is no sign of an outage and keeps its own
        # backoff: reset with the others, it would spend its tries in seconds.
        self._failing = False
        self._held_back: set[int] = set()
        # answered, not recorded yet (the outbox could not write): recorded first next run
        self._unrecorded: list[tuple[Event, Result]] = []
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run_once(self, max_batches: int = 1_000_000,
                 stopping: Callable[[], bool] = lambda: False) -> DeliveryStats:
        """Deliver until nothing is due (burst mode) or ``max_batches`` were sent. A batch
        in which nothing got through ends the burst: cc-backend is down, wait for backoff;
        the next burst sends a probe of one event first (and nothing beside it).
        ``stopping`` is asked before each batch is taken; the batches in flight are always
        finished."""
        stats = DeliveryStats()
        self._record_held(stats)
        flying: deque[_Batch] = deque()
        sent = 0
        while True:
            while len(flying) < (1 if self._failing else 2) and sent < max_batches \
                    and not stopping():
                events = self._due(flying)
                if not events:
                    break
                flying.append(_Batch(events, [self._pool.submit(self._deliver_one, ev)
                                              for ev in events]))
                sent += 1
            if not flying:
                break
            try:
                results = self._finish(flying.popleft(), stats)
            except CcAdapterError:
                self._hold(flying)
                raise
            if not any(r.status != DeliveryStatus.PENDING or r.waiting for r in results):
                self._failing = True
                self._held_back.update(r.event_id for r in results)
                while flying:  # sent already: their answers are recorded too
                    try:
                        done = self._finish(flying.popleft(), stats)
                    except CcAdapterError:
                        self._hold(flying)
                        raise
                    self._held_back.update(r.event_id for r in done
                                           if r.status == DeliveryStatus.PENDING
                                           and not r.waiting)
                break
            if self._failing:  # the probe got an answer
                self._failing = False
                if any(r.status == DeliveryStatus.DELIVERED for r in results):
                    self.queue.retry_now(self._held_back)
                    self._held_back = set()
        return stats

    def _due(self, flying: deque[_Batch]) -> list[Event]:
        """The next batch (one event while failing), without the events in flight."""
        limit = 1 if self._failing else self.batch
        busy = {ev.id for batch in flying for ev in batch.events}
        return [ev for ev in self.queue.due(limit + len(busy)) if ev.id not in busy][:limit]

    def _finish(self, batch: _Batch, stats: DeliveryStats) -> list[Result]:
        """Wait for a batch's answers and record them in one transaction. When they cannot
        be recorded (raises CcAdapterError), they are held for the next run."""
        results = [future.result() for future in batch.futures]
        try:
            self.queue.record(results)
        except CcAdapterError:
            self._unrecorded += zip(batch.events, results, strict=True)
            raise
        self._told(batch.events, results, stats)
        return results

    def _hold(self, flying: deque[_Batch]) -> None:
        """The outbox cannot record: the batches still in flight are answered all the same
        and their answers held, so that none of their events is sent again."""
        while flying:
            batch = flying.popleft()
            self._unrecorded += zip(batch.events,
                                    [future.result() for future in batch.futures], strict=True)

    def _record_held(self, stats: DeliveryStats) -> None:
        """Record the answers held since the outbox could not (raises CcAdapterError while
        it still cannot: nothing is sent meanwhile)."""
        if not self._unrecorded:
            return
        held = self._unrecorded
        self.queue.record(result for _, result in held)
        self._unrecorded = []
        log.info("%d delivery answer(s) held while the outbox could not record them are "
                 "recorded now", len(held))
        self._told([ev for ev, _ in held], [res for _, res in held], stats)

    def _told(self, events: list[Event], results: list[Result], stats: DeliveryStats) -> None:
        for ev, res in zip(events, results, strict=True):
            stats.add(res)
            if self.on_result:
                self.on_result(ev, res)

    def _deliver_one(self, event: Event) -> Result:
        try:
            return self.deliver(event)
        except Exception as exc:
            log.exception("delivering %s of job %s (%s) failed; tried again later",
                          event.kind, event.job_id, event.cluster)
            return Result(event.id, DeliveryStatus.PENDING, f"{type(exc).__name__}: {exc}")


def nats_first(nats: NatsDelivery, rest: RestDelivery | None, *, node_states_on_nats: bool
               ) -> Callable[[Event], Result]:
    """NATS as the only job path: starts and stops to NATS; node states to NATS when
    natsNodeStateSubject is set, else to REST; energy to REST (cc-backend's NATS API has no
    message for metadata; its REST edit_meta stays mounted, rest.go ``MountAPIRoutes``)."""

    def deliver(event: Event) -> Result:
        if event.kind in (EventKind.START, EventKind.STOP) or (
                event.kind == EventKind.NODESTATE and node_states_on_nats):
            return nats(event)
        if rest is None:  # left from a time with ccRestUrl or with natsNodeStateSubject
            return Result(event.id, DeliveryStatus.REJECTED, f"{event.kind} has no way out: "
                          f"{_NO_WAY_OUT.get(event.kind, 'set ccRestUrl')}")
        return rest(event)

    return deliver


_NO_WAY_OUT = {EventKind.NODESTATE: "set natsNodeStateSubject (or ccRestUrl)",
               EventKind.ENERGY: "it goes over REST only: set ccRestUrl"}
