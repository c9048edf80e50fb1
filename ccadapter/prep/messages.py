"""What a hook message must be; anything else is logged and dropped. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_MESSAGE = 64 * 1024
CONTEXTS = {"prolog_slurmctld": "start", "epilog_slurmctld": "end"}


class BadMessage(ValueError):
    """Names what is wrong; never echoes more than a short prefix of the message."""


@dataclass(frozen=True)
class HookMessage:
    job_id: int
    event: str  # "start" or "end"
    sent: float | None  # when the hook sent it (its clock), for latency figures


def parse_message(data: bytes, cluster: str) -> HookMessage:
    if len(data) > MAX_MESSAGE:
        raise BadMessage(f"message over {MAX_MESSAGE} bytes")
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BadMessage(f"not JSON: {data[:40]!r}") from None
    if not isinstance(body, dict):
        raise BadMessage(f"not a JSON object but {type(body).__name__}")
    context = body.get("SLURM_SCRIPT_CONTEXT")
    if context not in CONTEXTS:
        raise BadMessage(f"SLURM_SCRIPT_CONTEXT {str(context)[:40]!r} is not "
                         "prolog_slurmctld or epilog_slurmctld")
    job_id = body.get("SLURM_JOB_ID")
    if not isinstance(job_id, str) or not job_id.isdigit() or not 0 < int(job_id) < 2**32:
        raise BadMessage(f"SLURM_JOB_ID {str(job_id)[:40]!r} is not a job id")
    their = body.get("SLURM_CLUSTER_NAME")
    if their is not None and their != cluster:
        raise BadMessage(f"cluster {str(their)[:40]!r} is not ours ({cluster!r})")
    try:
        sent = float(body.get("CCADAPTER_HOOK_SENT", "nan"))
    except (TypeError, ValueError):
        sent = float("nan")
    return HookMessage(int(job_id), CONTEXTS[context], None if sent != sent else sent)
