"""Which hook messages the fast path asks slurmctld about, and who pays for the questions.

A message is refused here, before it costs slurmctld anything, when its id is one slurmctld
did not know lately (:mod:`ccadapter.prep.guard`, for senders other than slurmctld's own),
when the outbox holds its job in the state it announces already (``known``: a replay), or
when its sender's share of questions is spent (``share``, :mod:`ccadapter.prep.shares`). A
message announcing what a waiting job is to be asked anyway costs nothing more; one that adds
an event to it is charged. Each event of a job waiting or asked again remembers who announced
it (slurmctld's own first), so that its retries are paid from the same share: an end
replayed for a running job would otherwise cost ``slurmMaxRetries`` questions.

slurmctld's own hooks are not second-guessed (their ids are the real ones) nor checked
against the outbox. The messages of everyone else are admitted on a thread of their own
(:class:`StrangerLane`): asking the outbox may wait for its lock (an hourly compaction, a
large enqueue), and the socket's one thread must never wait for that while slurmctld's hooks
wait for their answer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable

from ccadapter.errors import CcAdapterError
from ccadapter.outbox import Outbox
from ccadapter.prep.guard import JobIdGuard
from ccadapter.prep.messages import DropReason, HookEvent, HookMessage
from ccadapter.prep.peers import Peer
from ccadapter.prep.shares import Shares

# whom a retry is charged to when no sender of its job's event is known
_UNKNOWN_SENDER = Peer("sender unknown")
LANE = 1_000  # strangers' messages waiting to be admitted (beyond that: dropped, share)


def questions(event: HookEvent) -> int:
    """The most asking about one job may cost slurmctld, so that a share bounds what is
    asked: ``show job``, a het job's leader beside its component, and the batch script (a
    start's; an end's whose start the outbox lacks)."""
    return 3 if event == HookEvent.START else 2


class Admission:
    """Shared by the threads that admit messages (:meth:`refuse`, :meth:`charge`,
    :meth:`note`) and the fast path's slots (:meth:`again`, :meth:`done`); its lock guards
    who announced what."""

    def __init__(self, outbox: Outbox, guard: JobIdGuard, shares: Shares) -> None:
        self.outbox = outbox
        self.guard = guard
        self.shares = shares
        # (id, event) waiting or retried -> whom its questions cost
        self._sender: dict[tuple[int, HookEvent], Peer] = {}
        self._lock = threading.Lock()

    def refuse(self, msg: HookMessage, adds: bool) -> DropReason | None:
        """Why ``msg`` is not to be asked about (None: ask, its questions drawn).
        ``adds``: it announces what its job, if waiting, is not to be asked yet."""
        if msg.peer.reserved:
            refused = None
        else:
            refused = self.guard.refuse(msg.job_id)
            if refused is None and adds and self._holds(msg):
                refused = DropReason.KNOWN
        if refused is None and adds and not self.charge(msg):
            refused = DropReason.SHARE
        return refused

    def charge(self, msg: HookMessage) -> bool:
        """Draw what asking ``msg``'s job may cost from its sender's share."""
        return self.shares.take(msg.peer, questions(msg.event))

    def note(self, msg: HookMessage) -> None:
        """``msg`` was taken: its event's questions are its sender's (slurmctld's own
        first)."""
        key = (msg.job_id, msg.event)
        with self._lock:
            if msg.peer.reserved or key not in self._sender:
                self._sender[key] = msg.peer

    def again(self, job_id: int, ids: Iterable[int], event: HookEvent) -> Peer | None:
        """Whether the job (``ids``: the ids it was announced by, a het job's components)
        may be asked again for ``event``: None if its sender's share pays, else the sender
        whose share is spent. The sender is remembered under ``job_id``, which the retry
        asks."""
        with self._lock:
            senders = [self._sender[(i, event)] for i in ids if (i, event) in self._sender]
            sender = next((s for s in senders if s.reserved), None) or next(
                iter(senders), _UNKNOWN_SENDER)
            self._sender[(job_id, event)] = sender
        return None if self.shares.take(sender, questions(event)) else sender

    def done(self, job_id: int) -> None:
        """The job is neither waiting nor to be asked again."""
        with self._lock:
            for event in HookEvent:
                self._sender.pop((job_id, event), None)

    def _holds(self, msg: HookMessage) -> bool:
        """Whether the outbox holds the job's latest run in the state the message announces:
        started for a start (a run that ended may be requeued: that start is asked), ended
        for an end."""
        try:
            held = self.outbox.latest_run(msg.cluster, msg.job_id)
        except CcAdapterError:
            return False
        return held == ("start" if msg.event == HookEvent.START else "stop")


class StrangerLane:
    """Messages of senders other than slurmctld's own, admitted one after another on a
    thread of their own (``take``), at most :data:`LANE` waiting; ``full(msg)`` is told of
    one that finds the lane full."""

    def __init__(self, take: Callable[[HookMessage], None],
                 full: Callable[[HookMessage], None], name: str) -> None:
        self._take, self._full = take, full
        self._queue: queue.Queue[HookMessage | None] = queue.Queue(LANE)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            with_room = True
            try:
                self._queue.put(None, timeout=1)
            except queue.Full:
                with_room = False
            self._thread.join(5 if with_room else 0)

    def put(self, msg: HookMessage) -> None:
        try:
            self._queue.put_nowait(msg)
        except queue.Full:
            self._full(msg)

    def idle(self) -> bool:
        return self._queue.unfinished_tasks == 0

    def _run(self) -> None:
        while (msg := self._queue.get()) is not None:
            try:
                self._take(msg)
            finally:
                self._queue.task_done()
        self._queue.task_done()
