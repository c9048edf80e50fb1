"""The NATS message of a start or stop event: what cc-backend's NATS ingest consumes.

``job,function=start_job,hostname=H,type=node,type-id=0 event="<start_job JSON>" <start ns>``
and the same with ``function=stop_job`` (plus ``partition`` when known) and the stop time.
The JSON is byte for byte the body the REST call sends, so a consumer may decode it with the
same strict schema. Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ccadapter.notify.lineproto import encode_line

FUNCTIONS = {"start": "start_job", "stop": "stop_job"}


@dataclass(frozen=True)
class Message:
    data: bytes
    msg_id: str  # JetStream's Nats-Msg-Id: the stream drops a resend within its window


def body_json(body: dict[str, Any]) -> str:
    """The REST body's JSON text (same separators and encoding as the REST client)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def msg_id(cluster: str, job_id: int, start_time: int, kind: str) -> str:
    """Derived from the outbox's identity of an event: a resend has the same id."""
    return f"{cluster}/{job_id}/{start_time}/{kind}"


def job_message(kind: str, body: dict[str, Any], hostname: str,
                partition: str = "") -> Message:
    """``kind`` is the outbox's ("start"/"stop"); ``body`` the REST body of that call."""
    tags = {"hostname": hostname, "type": "node", "type-id": "0",
            "function": FUNCTIONS[kind]}
    if kind == "stop" and partition:
        tags["partition"] = partition
    when = body["startTime"] if kind == "start" else body["stopTime"]
    line = encode_line("job", tags, {"event": body_json(body)}, int(when) * 1_000_000_000)
    return Message(line.encode(), msg_id(body["cluster"], body["jobId"], body["startTime"],
                                         kind))
