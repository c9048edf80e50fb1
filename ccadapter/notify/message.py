"""The NATS messages cc-backend's NATS ingest consumes (cc-backend v1.5.4,
``internal/api/nats.go``). Pure.

Job events, on ``natsSubject`` (cc-backend's ``subject-job-event``)::

    job,function=start_job,hostname=H,type=node,type-id=0 event="<start_job JSON>" <start ns>

and the same with ``function=stop_job`` (plus ``partition`` when known) and the stop time.
cc-backend routes on the measurement ``job`` and the ``function`` tag (``handleJobEvent``,
``processJobEvent``), takes the ``event`` string field (``processJobEvent``) and decodes it
with ``DisallowUnknownFields`` into ``schema.Job`` or ``StopJobAPIRequest`` (``handleStartJob``,
``handleStopJob``): the JSON is byte for byte the body the REST call sends.

Node state, on ``natsNodeStateSubject`` (cc-backend's ``subject-node-state``)::

    nodestate event="<UpdateNodeStatesRequest JSON>" <snapshot ns>

cc-backend reads the measurement ``nodestate`` (``handleNodeState``), needs no tag, and
decodes the ``event`` field strictly into ``UpdateNodeStatesRequest``
(``processNodestateEvent``; the struct is in ``internal/api/node.go``), the body of ``POST
/api/nodestate/``. The timestamp is required (cc-lib v2.12.0 ``ccMessage.NewMessage`` refuses
a zero time), though cc-backend stamps the states with the time it receives them
(``processNodestateEvent``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ccadapter.model import EventKind
from ccadapter.notify.lineproto import encode_line

FUNCTIONS = {EventKind.START: "start_job", EventKind.STOP: "stop_job"}
NODESTATE_MEASUREMENT = "nodestate"


@dataclass(frozen=True)
class Message:
    data: bytes
    msg_id: str  # JetStream's Nats-Msg-Id: the stream drops a resend within its window
    subject: str


def body_json(body: dict[str, Any]) -> str:
    """The REST body's JSON text (same separators and encoding as the REST client)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def msg_id(cluster: str, job_id: int, start_time: int, kind: EventKind) -> str:
    """Derived from the outbox's identity of an event: a resend has the same id."""
    return f"{cluster}/{job_id}/{start_time}/{kind}"


def job_message(kind: EventKind, body: dict[str, Any], hostname: str, subject: str,
                partition: str = "") -> Message:
    """``kind`` is the outbox's ("start"/"stop"); ``body`` the REST body of that call."""
    tags = {"hostname": hostname, "type": "node", "type-id": "0",
            "function": FUNCTIONS[kind]}
    if kind == EventKind.STOP and partition:
        tags["partition"] = partition
    when = body["startTime"] if kind == EventKind.START else body["stopTime"]
    line = encode_line("job", tags, {"event": body_json(body)}, int(when) * 1_000_000_000)
    return Message(line.encode(), msg_id(body["cluster"], body["jobId"], body["startTime"],
                                         kind), subject)


def nodestate_message(body: dict[str, Any], taken_at: int, subject: str) -> Message:
    """``body`` is the ``/api/nodestate/`` body; ``taken_at`` the snapshot's time (s), which
    is also the outbox's identity of this snapshot (its startTime)."""
    line = encode_line(NODESTATE_MEASUREMENT, {}, {"event": body_json(body)},
                       int(taken_at) * 1_000_000_000)
    return Message(line.encode(), msg_id(body["cluster"], 0, taken_at, EventKind.NODESTATE),
                   subject)


@dataclass(frozen=True)
class Published:
    ok: bool
    error: str = ""
    permanent: bool = False  # retrying cannot help (the message is too large)
    duplicate: bool = False  # JetStream had it already (a resend)


