"""One outbox event to NATS: build the message, publish it, say what became of it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from ccadapter.model import EventKind
from ccadapter.notify.lineproto import LineProtocolError
from ccadapter.notify.message import Message, Published, job_message, nodestate_message
from ccadapter.outbox import DeliveryStatus, Event, Result
from ccadapter.report.loggate import LogGate

log = logging.getLogger(__name__)


class Publisher(Protocol):
    def publish(self, msg: Message) -> Published: ...


@dataclass(frozen=True)
class Subjects:
    """Where each kind of event goes: cc-backend subscribes to job events and node states
    on two subjects (its ``subject-job-event`` and ``subject-node-state``). ``node_state``
    empty: node states are not published."""

    job: str
    node_state: str = ""


def event_message(event: Event, hostname: str, subjects: Subjects) -> Message:
    """A stop event's payload holds the stop body and, when known, its run's start body,
    which gives the ``partition`` tag. A nodestate event's payload is the REST body."""
    if event.kind == EventKind.NODESTATE:
        if not subjects.node_state:
            raise ValueError("node states are not published on NATS (natsNodeStateSubject "
                             "is empty)")
        return nodestate_message(event.payload, event.start_time, subjects.node_state)
    if event.kind == EventKind.START:
        return job_message(EventKind.START, event.payload, hostname, subjects.job)
    if event.kind == EventKind.STOP:
        start = event.payload.get("start") or {}
        return job_message(EventKind.STOP, event.payload["stop"], hostname, subjects.job,
                           start.get("partition", ""))
    raise ValueError(f"{event.kind} events have no NATS form")


class NatsDelivery:
    """``renumber``: a start body in cc-backend's numbering of its resources, as it is
    published (:mod:`ccadapter.numbering.renumber`)."""

    def __init__(self, publisher: Publisher, hostname: str, subjects: Subjects,
                 renumber: Callable[[dict], dict] | None = None) -> None:
        self.publisher = publisher
        self.renumber = renumber
        self.hostname = hostname
        self.subjects = subjects
        self._gate = LogGate()

    def __call__(self, event: Event) -> Result:
        what = (f"nodestate of {event.cluster} ({event.start_time})"
                if event.kind == EventKind.NODESTATE
                else f"{event.kind} of job {event.job_id} ({event.cluster}, start "
                     f"{event.start_time})")
        if event.kind == EventKind.START and self.renumber is not None:
            event = replace(event, payload=self.renumber(event.payload))
        try:
            msg = event_message(event, self.hostname, self.subjects)
        except (LineProtocolError, KeyError, TypeError, ValueError) as exc:
            log.error("NATS: cannot encode %s: %s", what, exc)
            return Result(event.id, DeliveryStatus.REJECTED, f"cannot encode for NATS: {exc}")
        pub = self.publisher.publish(msg)
        if pub.ok:
            log.debug("published %s on NATS subject %s%s", what, msg.subject,
                     " (a resend: dropped by the stream)" if pub.duplicate else "")
            return Result(event.id, DeliveryStatus.DELIVERED)
        if pub.permanent:
            log.error("NATS refused %s for good: %s", what, pub.error)
            return Result(event.id, DeliveryStatus.REJECTED, f"NATS: {pub.error}")
        if self._gate.allow(pub.error):  # one line per distinct problem and minute
            log.warning("NATS: %s not published, will retry: %s", what, pub.error)
        return Result(event.id, DeliveryStatus.PENDING, f"NATS: {pub.error}")
