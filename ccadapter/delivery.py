"""Drains a queue of the outbox with a bounded pool of workers.

One batch at a time: claim the due events, deliver them in parallel, record every result in
one transaction. A batch never holds a start and the stop of the same run (the queue hands
out a stop only after its start was delivered), so the per-job order needs no locking here.

What "deliver" means is a function of one event: :class:`RestDelivery` (cc-backend's REST
API, with its 404 dance) or :class:`ccadapter.notify.delivery.NatsDelivery`. The same engine
drains the outbox itself and its NATS notification queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from ccadapter.cc.client import ENERGY, NODESTATE, START, STOP, Answer, Outcome
from ccadapter.loggate import LogGate
from ccadapter.outbox import DELIVERED, PENDING, REJECTED, Event, Result

log = logging.getLogger(__name__)


class Sender(Protocol):
    def send(self, kind: str, body: dict) -> Answer: ...


class Queue(Protocol):
    """What the engine drains: the outbox, or its NATS notification queue."""

    def due(self, limit: int = 256) -> list[Event]: ...

    def record(self, results: Iterable[Result]) -> None: ...

    def retry_now(self) -> None: ...


@dataclass
class DeliveryStats:
    delivered: int = 0
    retried: int = 0
    rejected: int = 0

    def add(self, result: Result) -> None:
        if result.status == DELIVERED:
            self.delivered += 1
        elif result.status == REJECTED:
            self.rejected += 1
        else:
            self.retried += 1


class Deliverer:
    def __init__(self, queue: Queue, deliver: Callable[[Event], Result], workers: int = 8,
                 batch: int = 256,
                 on_result: Callable[[Event, Result], None] | None = None) -> None:
        self.queue = queue
        self.deliver = deliver
        self.batch = batch
        self.on_result = on_result
        # Set by a batch in which nothing got through: the target is down and events wait
        # with growing delays (up to minutes). The first success afterwards makes all of
        # them due at once, so a backlog drains when the target is back, not minutes later.
        self._failing = False
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run_once(self, max_batches: int = 1_000_000,
                 stopping: Callable[[], bool] = lambda: False) -> DeliveryStats:
        """Deliver until nothing is due (burst mode) or ``max_batches`` were sent. A batch
        in which nothing got through ends the burst: cc-backend is down, wait for backoff.
        ``stopping`` is asked between batches; the batch in flight is always finished."""
        stats = DeliveryStats()
        for _ in range(max_batches):
            if stopping():
                break
            events = self.queue.due(self.batch)
            if not events:
                break
            results = list(self._pool.map(self.deliver, events))
            self.queue.record(results)
            for ev, res in zip(events, results, strict=True):
                stats.add(res)
                if self.on_result:
                    self.on_result(ev, res)
            if not any(r.status != PENDING for r in results):
                self._failing = True
                break
            if self._failing and any(r.status == DELIVERED for r in results):
                self._failing = False
                self.queue.retry_now()
        return stats


# cc-backend answers an energy edit 422 while it has no such job in its job table (a stop it
# received over NATS and has not applied yet) and 500 when it stored the value but could not
# update the job's archive (v1.5.4 repository/job.go:301-310, pkg/archive/archive.go:374-390:
# the archiver is still writing it, failed, or monitoring is off for the job). Both are
# retried with the outbox's backoff; an event that gets one of them at its tenth attempt
# or later (some 4 to 9 minutes after its stop) is rejected with cc-backend's answer
# (``queue retry`` sends it again). Other failures (cc-backend down) are retried for as
# long as it takes, like every event, but count as attempts.
ENERGY_ATTEMPTS = 10
_ENERGY_NOT_YET = frozenset({422, 500})


class RestDelivery:
    """One event to cc-backend, following its answers to a final result. A failure that
    repeats for every event (cc-backend down, the token refused) is logged once a minute,
    not once per event: each event's own error is kept in the outbox (``queue list``)."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self._gate = LogGate()

    def __call__(self, event: Event) -> Result:
        if event.kind == STOP:
            return self._deliver_stop(event)
        answer = self.sender.send(event.kind, event.payload)
        return self._result(event, answer)

    def _deliver_stop(self, event: Event) -> Result:
        answer = self.sender.send(STOP, event.payload["stop"])
        if answer.outcome is not Outcome.NEEDS_START:
            return self._result(event, answer)
        # cc-backend never saw this run: its start first, then the stop again.
        start = event.payload.get("start")
        if not start:
            return Result(event.id, REJECTED, "stop answered 404 and no start body is known")
        first = self.sender.send(START, start)
        if first.outcome is not Outcome.DELIVERED:
            return self._result(event, first, note="start before stop: ")
        log.info("job %d (%s): start delivered late, before its stop", event.job_id,
                 event.cluster)
        again = self.sender.send(STOP, event.payload["stop"])
        if again.outcome is Outcome.NEEDS_START:
            return Result(event.id, REJECTED,
                          f"cc-backend has no run of job {event.job_id} starting at "
                          f"{event.start_time}, even after its start was accepted "
                          f"(HTTP {first.status}); another run within 24 h? {again.detail}")
        return self._result(event, again)

    def _result(self, event: Event, answer: Answer, note: str = "") -> Result:
        what = (f"nodestate of {event.cluster}" if event.kind == NODESTATE else
                f"{event.kind} of job {event.job_id} ({event.cluster}, start {event.start_time})")
        if answer.outcome is Outcome.DELIVERED:
            log.info("delivered %s: HTTP %d", what, answer.status)
            return Result(event.id, DELIVERED)
        if answer.outcome is Outcome.REJECTED:
            log.error("cc-backend rejected %s: HTTP %d %s", what, answer.status, answer.detail)
            return Result(event.id, REJECTED, f"{note}HTTP {answer.status}: {answer.detail}")
        if event.kind == ENERGY and answer.status in _ENERGY_NOT_YET:
            return self._energy_not_yet(event, answer, what)
        # the same problem for every event: keyed by the status (and the transport error)
        said = self._gate.allow(f"{answer.status} {answer.detail if not answer.status else ''}")
        if answer.outcome is Outcome.AUTH and said:
            log.error("cc-backend refused our token (HTTP %d) for %s: check ccRestJwt; "
                      "will retry", answer.status, what)
        elif event.kind == NODESTATE and answer.status == 0:
            log.debug("nodestate not delivered: %s", answer.detail)
        elif said:
            log.warning("%s not delivered, will retry: HTTP %d %s (said once a minute)", what,
                        answer.status, answer.detail)
        return Result(event.id, PENDING, f"{note}HTTP {answer.status}: {answer.detail}")

    def _energy_not_yet(self, event: Event, answer: Answer, what: str) -> Result:
        """An energy edit cc-backend could not apply yet (see :data:`ENERGY_ATTEMPTS`)."""
        error = f"HTTP {answer.status}: {answer.detail}"
        if event.attempts + 1 >= ENERGY_ATTEMPTS:
            log.error("cc-backend did not take %s after %d attempts: %s", what,
                      event.attempts + 1, error)
            return Result(event.id, REJECTED, f"gave up after {event.attempts + 1} attempts: "
                                              f"{error}")
        log.info("%s not taken yet, will retry: %s", what, error)
        return Result(event.id, PENDING, error)
