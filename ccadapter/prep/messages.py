"""What a hook message must be; anything else is logged and dropped. Pure.

A message names its cluster (``SLURM_CLUSTER_NAME``, set by slurmctld for PrologSlurmctld
and EpilogSlurmctld); one without it belongs to the cluster of the socket it came in on.
Whether this daemon serves that cluster is the router's question
(:class:`ccadapter.prep.router.HookRouter`), not the parser's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum

from ccadapter.prep.peers import IN_PROCESS, Peer

MAX_MESSAGE = 64 * 1024


class HookEvent(StrEnum):
    """What a hook message announces of its job: the fast path's word for it, in its
    queue, its retries and its log lines."""

    START = "start"  # from PrologSlurmctld: the job was allocated its nodes
    END = "end"  # from EpilogSlurmctld: the job ended


# SLURM_SCRIPT_CONTEXT, as slurmctld sets it for the hook, -> what the message announces
CONTEXTS = {"prolog_slurmctld": HookEvent.START, "epilog_slurmctld": HookEvent.END}


class DropReason(StrEnum):
    """Why a hook message was not acted on: the metrics' ``reason`` label, ``status``'s
    keys and the log's words (:mod:`ccadapter.prep.tally`). The poll picks the job up."""

    INVALID = "invalid"  # not a hook message, or a cluster this daemon does not serve
    TOO_LARGE = "too_large"  # over MAX_MESSAGE
    TIMEOUT = "timeout"  # not complete within a second
    FAST_PATH_FULL = "fast_path_full"  # the fast path holds its maximum of jobs
    STANDBY = "standby"  # the daemon stands by (slurmctldFailover)
    UNKNOWN_JOB = "unknown_job"  # slurmctld did not show that job when asked before
    FLOOD = "flood"  # many unknown jobs lately, and this id is unlike slurmctld's
    PEER = "peer"  # a TCP connection from outside prepSockAllowedPeers
    KNOWN = "known"  # the daemon holds that job in that state already: nothing to ask
    SHARE = "share"  # its peer's share of slurmctld's questions is spent (prep.shares)
    CONNECTIONS = "connections"  # its peer holds its share of the socket's connections


class BadMessage(ValueError):
    """Names what is wrong; never echoes more than a short prefix of the message."""


@dataclass(frozen=True)
class HookMessage:
    job_id: int
    event: HookEvent
    sent: float | None  # when the hook sent it (its clock), for latency figures
    cluster: str = ""  # SLURM_CLUSTER_NAME, else the socket's cluster
    peer: Peer = IN_PROCESS  # who sent it (the socket's peer credentials or address)
    array_job_id: int = 0  # SLURM_ARRAY_JOB_ID of an array's task (prep.arrays), else 0


def parse_message(data: bytes, cluster: str | None, peer: Peer = IN_PROCESS) -> HookMessage:
    """The message in ``data``, or :class:`BadMessage`; never any other exception, since
    the server's one thread must outlive whatever arrives on its socket. ``cluster``: the
    cluster of the socket it came in on (None: a socket of several clusters)."""
    if len(data) > MAX_MESSAGE:
        raise BadMessage(f"message over {MAX_MESSAGE} bytes")
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        # ValueError also covers integers past Python's 4,300-digit conversion limit.
        raise BadMessage(f"not JSON: {data[:40]!r}") from None
    except RecursionError:
        raise BadMessage(f"JSON nested too deeply: {data[:40]!r}") from None
    if not isinstance(body, dict):
        raise BadMessage(f"not a JSON object but {type(body).__name__}")
    context = body.get("SLURM_SCRIPT_CONTEXT")
    if not isinstance(context, str) or context not in CONTEXTS:
        raise BadMessage(f"SLURM_SCRIPT_CONTEXT {str(context)[:40]!r} is not "
                         "prolog_slurmctld or epilog_slurmctld")
    job_id = body.get("SLURM_JOB_ID")
    if not _is_job_id(job_id):
        raise BadMessage(f"SLURM_JOB_ID {str(job_id)[:40]!r} is not a job id")
    their = body.get("SLURM_CLUSTER_NAME", cluster)
    if their is None:
        raise BadMessage("no SLURM_CLUSTER_NAME, and this socket serves several clusters")
    if not isinstance(their, str) or not their:
        raise BadMessage(f"SLURM_CLUSTER_NAME {str(their)[:40]!r} is not a cluster name")
    array = body.get("SLURM_ARRAY_JOB_ID")  # only spares questions: unreadable is none
    return HookMessage(int(job_id), CONTEXTS[context], _sent(body.get("CCADAPTER_HOOK_SENT")),
                       their, peer, int(array) if _is_job_id(array) else 0)


def _is_job_id(value: object) -> bool:
    """Slurm writes SLURM_JOB_ID as ASCII decimal digits of a 32-bit id. ``str.isdigit``
    alone also accepts "²" (which ``int`` refuses) and "١٢" (which ``int`` reads as 12): a
    job id Slurm never sends. Ten digits at most, so ``int`` never meets a huge string."""
    return (isinstance(value, str) and value.isascii() and value.isdigit()
            and len(value) <= 10 and 0 < int(value) < 2**32)


def _sent(value: object) -> float | None:
    """The hook's send time (``repr(time.time())``): a finite number, or None. It only
    feeds latency figures, so anything else costs the figure, never the message."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        sent = float(value)
    except (ValueError, OverflowError):  # OverflowError: an int past float's range
        return None
    return sent if math.isfinite(sent) else None
