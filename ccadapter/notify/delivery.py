"""One outbox event to NATS: build the message, publish it, say what became of it."""

from __future__ import annotations

import logging
from typing import Protocol

from ccadapter.loggate import LogGate
from ccadapter.notify.lineproto import LineProtocolError
from ccadapter.notify.message import Message, job_message
from ccadapter.notify.nats import Published
from ccadapter.outbox import DELIVERED, PENDING, REJECTED, Event, Result

log = logging.getLogger(__name__)


class Publisher(Protocol):
    def publish(self, msg: Message) -> Published: ...


def event_message(event: Event, hostname: str) -> Message:
    """A stop event's payload holds the stop body and, when known, its run's start body,
    which gives the ``partition`` tag."""
    if event.kind == "start":
        return job_message("start", event.payload, hostname)
    start = event.payload.get("start") or {}
    return job_message("stop", event.payload["stop"], hostname, start.get("partition", ""))


class NatsDelivery:
    def __init__(self, publisher: Publisher, hostname: str) -> None:
        self.publisher = publisher
        self.hostname = hostname
        self._gate = LogGate()

    def __call__(self, event: Event) -> Result:
        what = f"{event.kind} of job {event.job_id} ({event.cluster}, start {event.start_time})"
        try:
            msg = event_message(event, self.hostname)
        except (LineProtocolError, KeyError, TypeError, ValueError) as exc:
            log.error("NATS: cannot encode %s: %s", what, exc)
            return Result(event.id, REJECTED, f"cannot encode for NATS: {exc}")
        pub = self.publisher.publish(msg)
        if pub.ok:
            log.info("published %s on NATS%s", what, " (a resend: dropped by the stream)"
                     if pub.duplicate else "")
            return Result(event.id, DELIVERED)
        if pub.permanent:
            log.error("NATS refused %s for good: %s", what, pub.error)
            return Result(event.id, REJECTED, f"NATS: {pub.error}")
        if self._gate.allow(pub.error):  # one line per distinct problem and minute
            log.warning("NATS: %s not published, will retry: %s", what, pub.error)
        return Result(event.id, PENDING, f"NATS: {pub.error}")
