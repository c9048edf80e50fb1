"""The durable outbox (:mod:`ccadapter.outbox.events`): its file and transactions
(:mod:`.store`), the queues the deliverers drain (:mod:`.queue`) and the operator's
commands (:mod:`.admin`)."""

from ccadapter.outbox.events import NewEvent, Outbox
from ccadapter.outbox.queue import NOT_HELD, DeliveryQueue, DeliveryStatus, Event, Result

__all__ = ["NOT_HELD", "DeliveryQueue", "DeliveryStatus", "Event", "NewEvent", "Outbox",
           "Result"]
