"""Which hook messages the fast path asks slurmctld about, and who pays for the questions.

A message is refused here, before it costs slurmctld anything, when its id is one slurmctld
did not know lately (:mod:`ccadapter.prep.guard`, for senders other than slurmctld's own),
when the outbox holds its job in the state it announces already (``known``: a replay), or
when its sender's share of questions is spent (``share``, :mod:`ccadapter.prep.shares`). A
message joining a job already waiting to be asked costs nothing more. Each job waiting or
being asked again remembers who announced it (slurmctld's own first), so that a retry is paid
from the same share: an end replayed for a running job would otherwise cost
``slurmMaxRetries`` questions.

slurmctld's own hooks are not second-guessed (their ids are the real ones) nor checked
against the outbox (that would only slow a burst of them down); they draw on their reserve.
"""

from __future__ import annotations

import threading

from ccadapter.errors import CcAdapterError
from ccadapter.outbox import Outbox
from ccadapter.prep.guard import JobIdGuard
from ccadapter.prep.messages import DropReason, HookEvent, HookMessage
from ccadapter.prep.peers import Peer
from ccadapter.prep.shares import Shares

# whom a retry is charged to when its job's sender is not known (a het job's component)
_UNKNOWN_SENDER = Peer("sender unknown")


def questions(event: HookEvent) -> int:
    """The most asking about one job may cost slurmctld, so that a share bounds what is
    asked: ``show job``, a het job's leader beside its component, and the batch script (a
    start's; an end's whose start the outbox lacks)."""
    return 3 if event == HookEvent.START else 2


class Admission:
    """Shared by the socket's thread (:meth:`refuse`, :meth:`note`) and the fast path's
    slots (:meth:`again`, :meth:`done`); its lock guards who announced what."""

    def __init__(self, outbox: Outbox, guard: JobIdGuard, shares: Shares) -> None:
        self.outbox = outbox
        self.guard = guard
        self.shares = shares
        self._sender: dict[int, Peer] = {}  # waiting or retried id -> whom its questions cost
        self._lock = threading.Lock()

    def refuse(self, msg: HookMessage, joins: bool) -> DropReason | None:
        """Why ``msg`` is not to be asked about (None: ask, its questions drawn).
        ``joins``: its job waits to be asked anyway."""
        if msg.peer.reserved:
            refused = None
        else:
            refused = self.guard.refuse(msg.job_id)
            if refused is None and not joins and self._holds(msg):
                refused = DropReason.KNOWN
        if refused is None and not joins and not self.shares.take(msg.peer,
                                                                   questions(msg.event)):
            refused = DropReason.SHARE
        return refused

    def note(self, msg: HookMessage) -> None:
        """``msg`` was taken: its job's questions are its sender's (slurmctld's own first)."""
        with self._lock:
            if msg.peer.reserved or msg.job_id not in self._sender:
                self._sender[msg.job_id] = msg.peer

    def again(self, job_id: int, event: HookEvent) -> Peer | None:
        """Whether the job may be asked again: None if its sender's share pays for it, else
        the sender whose share is spent."""
        with self._lock:
            sender = self._sender.get(job_id, _UNKNOWN_SENDER)
        return None if self.shares.take(sender, questions(event)) else sender

    def done(self, job_id: int) -> None:
        """The job is neither waiting nor to be asked again."""
        with self._lock:
            self._sender.pop(job_id, None)

    def _holds(self, msg: HookMessage) -> bool:
        """Whether the outbox holds the job's latest run in the state the message announces:
        started for a start (a run that ended may be requeued: that start is asked), ended
        for an end."""
        try:
            held = self.outbox.latest_run(msg.cluster, msg.job_id)
        except CcAdapterError:
            return False
        return held == ("start" if msg.event == HookEvent.START else "stop")
