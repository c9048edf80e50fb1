"""Jobs announced by the hook are synced at once, from slurmctld's view (no sacct, no fixed
wait): a start is in the outbox as soon as ``scontrol show job -d`` shows its allocation.

Messages are coalesced, so a 1,000-task array starting costs a handful of ``scontrol``
questions, not 1,000, and a churn two or three per start (its job and its batch script, asked
at the same time, and the ends that waited), put to long-lived scontrol processes
(:meth:`~ccadapter.slurm.runner.SlurmRunner.ask`); an end's script is not asked (the start
the outbox holds carries it). Questions go out in up to ``SLOTS`` slots at once, each with
its own scontrol processes; a slot takes the starts that are due (a burst split among the
free slots) as soon as its last answer is stored, so a start waits for the questions asked
before it only while every slot is busy.

The hook announces a start from PrologSlurmctld, while slurmctld holds the job in
CONFIGURING until the hook has exited and been reaped (the start latencies that follow are in
BENCHMARKS.md, sections "Prolog/Epilog fast path" and "Scale: a long queue of pending jobs").
Where slurmctld boots no nodes for jobs, the StartTime a CONFIGURING job shows
is final and the start is asked and sent at once (:mod:`ccadapter.slurm.nodeboot`); where it
may boot them, a start waits ``start_settle`` seconds, so that slurmctld is not asked while
it surely answers CONFIGURING. An end waits up to ``coalesce`` seconds, or is asked when
the next start is, in a slot left free (it comes from EpilogSlurmctld: slurmctld has ended
the job already; nobody waits for it); a job is not asked in two slots at once. A start
or end that slurmctld has not finished recording is asked again after a short, growing
delay (at most ``slurmQueryDelay`` seconds), up to ``slurmMaxRetries`` times. Whatever
the fast path misses, the poll catches: it is an accelerator, never the only path, so a
full pending set drops messages, and so do the rules that bound what a message may cost
(:mod:`ccadapter.prep.admission`: a replayed job the outbox holds is not asked, every
question is drawn from its sender's share, a retry too, and ids slurmctld does not know are
bounded further). Drops are counted and said in a few log lines, never one per
message (:mod:`ccadapter.prep.tally`).

slurmctld runs the hook once per component of a heterogeneous job, each time with that
component's id (and ``SLURM_HET_JOB_ID``, the leader's). The collector reads every component
of the het job whichever was announced, and builds one job under the leader's id; the
announcements of all its components count for that job (an end is awaited until the last
component has ended).
"""

from __future__ import annotations

import heapq
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from ccadapter.errors import CcAdapterError
from ccadapter.model import Job, base_state
from ccadapter.outbox import Outbox
from ccadapter.prep.admission import LANE, Admission, StrangerLane
from ccadapter.prep.arrays import ArrayScripts
from ccadapter.prep.dbd_ends import ends_in_slurmdbd
from ccadapter.prep.guard import JobIdGuard
from ccadapter.prep.messages import DropReason, HookEvent, HookMessage
from ccadapter.prep.pace import Pace
from ccadapter.prep.requeued import ended_runs, read_from_slurmdbd
from ccadapter.prep.shares import Shares
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.retry import RetryPolicies, RetryPolicy
from ccadapter.slurm.collector import Collector

log = logging.getLogger(__name__)

# parts a fast path asks of slurmctld at once
SLOTS = 3
# long-lived scontrol processes the daemon's SlurmRunner keeps per cluster: two per slot, as a
# part's batch scripts are asked beside its jobs (Slurmctld._singles)
SESSIONS = 2 * SLOTS
# How long a stop waits for the parts being asked (each question is bounded by
# slurmCommandTimeout; what a stop cuts short is left to the poll, said in the log).
DRAIN = 30.0


class FastPath:
    def __init__(self, collector: Collector, outbox: Outbox, wake: Callable[[], None], *,
                 ignore: re.Pattern[str] | None = None, retry: RetryPolicy | None = None,
                 max_pending: int = 10_000, coalesce: float = 0.5, start_settle: float = 0.06,
                 burst: float = 0.02,
                 slots: int = SLOTS, guard: JobIdGuard | None = None,
                 shares: Shares | None = None, ends_from_slurmdbd: bool = True,
                 on_received: Callable[[], None] | None = None,
                 on_drop: Callable[[DropReason, str], None] | None = None,
                 on_unknown: Callable[[list[int]], None] | None = None,
                 on_paced: Callable[[bool], None] | None = None) -> None:
        """``on_received()``, ``on_drop(reason, detail)`` and ``on_unknown(ids)`` (ids
        slurmctld did not show) count messages for the daemon's metrics and log
        (:class:`~ccadapter.prep.tally.HookTally`), as PrepServer's ``on_drop`` does;
        ``on_paced(paced)`` hears when slurmctld's slowness paces the questions (:mod:`.pace`).
        ``slots``: how many parts are asked of slurmctld at once (:meth:`_take`).
        ``shares``: what senders may cost slurmctld, shared by every cluster's fast path.
        ``ends_from_slurmdbd``: ends whose start is stored are read there (:mod:`.dbd_ends`)."""
        self.collector, self.outbox, self.wake, self.ignore = collector, outbox, wake, ignore
        self.retry = retry or RetryPolicies().fast_path
        self.max_pending, self.coalesce, self.start_settle = max_pending, coalesce, start_settle
        self.burst, self.slots, self.ends_from_slurmdbd = burst, max(1, slots), ends_from_slurmdbd
        self.guard = guard or JobIdGuard()
        self.admission = Admission(outbox, self.guard, shares or Shares())
        # id -> (events, attempts, when it is due: monotonic seconds)
        self._pending: dict[int, tuple[set[HookEvent], int, float]] = {}
        self._later: list[tuple[float, int, HookEvent, int]] = []  # (due, id, event, attempts)
        self._asked: set[int] = set()  # the ids of the parts being asked
        self._free = self.slots  # slots not asking
        self._abandoned = self._stopping = False  # abandoned: late answers are not stored
        self._cond = threading.Condition()
        # logs (and the thread) name the cluster where one daemon serves several
        cluster = getattr(collector, "cluster", None)
        self.name = f"fast path[{cluster}]" if cluster else "fast path"
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"fast-path-{cluster}" if cluster else "fast-path")
        self._lane = StrangerLane(self._take_in, lambda msg: self._drop(
            DropReason.SHARE, f"{self.name}: job {msg.job_id} {msg.event} from "
            f"{msg.peer.key}, {LANE} strangers' messages waiting"), f"{self._thread.name}-lane")
        self._asking = ThreadPoolExecutor(self.slots, f"{self._thread.name}-ask")
        # each part's batch scripts, asked beside its jobs (Slurmctld._singles)
        self._scripts = ThreadPoolExecutor(self.slots, f"{self._thread.name}-scripts")
        self.arrays = ArrayScripts()  # one batch script asked per array job
        self.pace = Pace(collector.costs, self.slots, self.name, on_change=on_paced)
        self.on_received, self.on_drop, self.on_unknown = on_received, on_drop, on_unknown

    def start(self) -> FastPath:
        self._lane.start()
        self._thread.start()
        return self

    def stop(self, drain: float = DRAIN) -> None:
        """Take no more parts; wait up to ``drain`` s for the parts being asked to be stored
        (the daemon closes the outbox next: a later answer's jobs are left to the poll)."""
        self._lane.stop()
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(10)
        with self._cond:
            if not self._cond.wait_for(lambda: self._free == self.slots, drain):
                self._abandoned = True
                log.info("%s: stopping with %d part(s) still asked of slurmctld; their jobs "
                         "are left to the poll", self.name, self.slots - self._free)
        self._asking.shutdown(wait=False, cancel_futures=True)
        self._scripts.shutdown(wait=False, cancel_futures=True)

    def submit(self, msg: HookMessage) -> None:
        log.debug("hook: job %d %s, sent at %.3f", msg.job_id, msg.event, msg.sent or 0.0)
        if self.on_received:
            self.on_received()
        if msg.peer.reserved:
            self._take_in(msg)
        else:  # admitted on a thread of its own: the socket's thread never waits for it
            self._lane.put(msg)

    def _take_in(self, msg: HookMessage) -> None:
        what = f"{self.name}: job {msg.job_id} {msg.event} from {msg.peer.key}"
        adds = not self._waits_for(msg)  # what is asked anyway costs nothing more
        refused = self.admission.refuse(msg, adds)
        if refused is not None:
            self._drop(refused, what)
            return
        with self._cond:
            if msg.job_id not in self._pending and len(self._pending) >= self.max_pending:
                self._drop(DropReason.FAST_PATH_FULL, f"{what}, {self.max_pending} jobs "
                           "pending")
                return
            if not adds and not self._waits_for(msg) and not self.admission.charge(msg):
                self._drop(DropReason.SHARE, what)  # taken to be asked meanwhile
                return
            self.admission.note(msg)
            self.arrays.note(msg.job_id, msg.array_job_id)
            wait = self._settle() if msg.event == HookEvent.START else self.coalesce
            events, attempts, due = self._pending.get(msg.job_id, (set(), 0, float("inf")))
            self._pending[msg.job_id] = (events | {msg.event}, attempts,
                                         min(due, time.monotonic() + wait))
            self._cond.notify()

    def _waits_for(self, msg: HookMessage) -> bool:
        """Whether ``msg``'s job waits to be asked for what it announces."""
        with self._cond:
            return msg.event in self._pending.get(msg.job_id, (set(),))[0]

    def _settle(self) -> float:
        """How long a start waits before it is asked: only where slurmctld may boot its
        nodes, and so hold it CONFIGURING with a StartTime that is not final (the last
        reading of its config: reading it again is the fast path thread's, not the
        listener's)."""
        return self.start_settle if self.collector.slurmctld.node_boot.may_boot else 0.0

    def _loop(self) -> None:
        self.collector.slurmctld.node_boot.refresh()  # the first start waits only if it must
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    move_due_later(self._later, self._pending, now)
                    due = min((d for i, (_, _, d) in self._pending.items()
                               if i not in self._asked), default=None)
                    free = self.pace.usable(self._free)  # fewer while slurmctld is slow
                    if due is not None and due <= now and free:
                        break
                    if not free:
                        due = None  # until a slot is free (_ask_part notifies)
                    if self._later and (due is None or self._later[0][0] < due):
                        due = self._later[0][0]  # a retry's delay ends first
                    self._cond.wait(None if due is None else max(0.0, due - now))
                if self._stopping:
                    return
                parts = self._take(time.monotonic(), free)
                self._free -= len(parts)
                self._asked.update(i for part in parts for i in part)
            for part in parts:
                self._asking.submit(self._ask_part, part)

    def _take(self, now: float, free: int) -> list[dict[int, tuple[set[HookEvent], int]]]:
        """Parts for ``free`` slots (:func:`take_parts`), out of the pending jobs."""
        return take_parts(self._pending, self._asked, free, now, self.burst,
                          self.collector.costs.prefer_dump)

    def _ask_part(self, part: dict[int, tuple[set[HookEvent], int]]) -> None:
        """One slot: a part asked of its own long-lived scontrol and put into the outbox as
        soon as its answer is read. slurmctld answers one scontrol's questions in turn, each
        waiting for its locks while it starts the jobs of a burst, but several scontrol at
        once: so a start does not wait for the questions asked before it. A het job whose
        components fall into two parts is read whole in both; the outbox keeps its events
        once. A bug leaves only this part's jobs to the poll, and says how many."""
        retried: set[int] = set()
        try:
            retried = self._sync_part(part)
        except Exception:  # a bug must not end the fast path: the poll goes on
            log.exception("%s: %d job(s) left to the poll", self.name, len(part))
        finally:
            with self._cond:
                self._free += 1
                self._asked.difference_update(part)
                done = [i for i in part if i not in retried and i not in self._pending]
                for job_id in done:
                    self.admission.done(job_id)
                self.arrays.part_done(part, done)
                self._cond.notify_all()  # the loop, and a stop waiting for the slots

    def _sync_part(self, part: dict[int, tuple[set[HookEvent], int]]) -> set[int]:
        """Asks slurmctld about the part's ids and puts their events into the outbox, or
        leaves them to the poll; returns the ids to be asked again. Every job read (a het
        job's components too) counts the announcements of all its ids in the part."""
        events, again, took_ends = ends_in_slurmdbd(  # those whose start is stored
            self.collector, self.outbox, self.collector.slurmctld.cluster_name(), part,
            self.ignore) if self.ends_from_slurmdbd else ([], {}, set())
        retried = {i for i, n in again.items() if self._retry(i, [i], HookEvent.END, n)}
        ids = sorted(set(part) - took_ends)
        starts = {i for i, (kinds, _) in part.items() if HookEvent.START in kinds}
        asked = time.monotonic()
        try:
            # one question to a long-lived scontrol, batch scripts of the starts included
            jobs, missing = self.collector.controller_jobs(
                ids, scripts_for=self.arrays.to_ask(starts), beside=self._scripts)
            jobs = with_missed_scripts(self.collector, self.outbox, self.arrays.fill(jobs),
                                       starts)
        except CcAdapterError as exc:
            log.warning("%s: %s; %d job(s) left to the poll", self.name, exc, len(ids))
            ids, jobs, missing = [], [], []
        log.debug("%s: %d job(s) asked in %.3f s", self.name, len(ids),
                  time.monotonic() - asked)
        requeued: list[tuple[Job, int]] = []
        for job in jobs:
            told = [part[i] for i in job.slurm_ids if i in part]  # components: several
            wanted = set().union(*(kinds for kinds, _ in told))
            attempts = max((n for _, n in told), default=0)
            log.debug("%s: job %d %s (try %d)", self.name, job.job_id, job.state, attempts + 1)
            if read_from_slurmdbd(job, self.outbox, wanted):
                requeued.append((job, attempts))
                continue
            again = None
            if HookEvent.END in wanted and not job.finished:
                again = HookEvent.END
            elif HookEvent.START in wanted and base_state(job.state) == "CONFIGURING":
                # its nodes may boot, and slurmctld reset StartTime once they are up: the
                # start is not final yet (ccadapter.model.PENDING_STATES, .slurm.nodeboot)
                again = HookEvent.START
            ids = [i for i in job.slurm_ids if i in part]
            if again is not None and self._retry(job.job_id, ids, again, attempts):
                retried.add(job.job_id)
            events.extend(events_for(job, self.ignore))
        if requeued:
            found, unended = ended_runs(self.collector, [job for job, _ in requeued])
            events.extend(e for run in found for e in events_for(run, self.ignore))
            retried.update(job.job_id for job, n in requeued if job.job_id in unended and
                           self._retry(job.job_id, [i for i in job.slurm_ids if i in part],
                                       HookEvent.END, n))  # its end not in slurmdbd yet
        self.guard.answered((i for job in jobs for i in job.slurm_ids), missing)
        if missing and self.on_unknown:
            self.on_unknown(missing)
        elif missing:
            log.info("%s: slurmctld does not show job(s) %s; left to the poll", self.name,
                     ", ".join(map(str, missing[:5])))
        with self._cond:
            if self._abandoned:  # the daemon stopped without this answer: the outbox is shut
                return retried
        try:
            added = self.outbox.enqueue(events) if events else 0
        except CcAdapterError as exc:  # e.g. the disk is full: the poll finds them later
            log.error("%s: %s; %d job(s) left to the poll", self.name, exc, len(ids))
            return retried
        if added:
            self.wake()
        return retried

    def _drop(self, reason: DropReason, detail: str) -> None:
        (self.on_drop or _log_drop)(reason, detail)

    def _retry(self, job_id: int, ids: list[int], event: HookEvent, attempts: int) -> bool:
        """Asks the job again later, if tries are left and its sender's share pays for it
        (an end replayed for a running job would otherwise cost ``slurmMaxRetries``
        questions a message)."""
        if self.retry.exhausted(attempts + 1):
            log.info("%s: job %d not %s after %d tries; left to the poll", self.name,
                     job_id, "ended" if event == HookEvent.END else "running", attempts + 1)
            return False
        spent = self.admission.again(job_id, ids, event)
        if spent is not None:
            self._drop(DropReason.SHARE, f"{self.name}: job {job_id} {event} asked again, "
                       f"from {spent.key}")
            return False
        delay = self.retry.delay(attempts + 1)
        with self._cond:
            heapq.heappush(self._later, (time.monotonic() + delay, job_id, event, attempts + 1))
            self._cond.notify()
        return True


def _log_drop(reason: DropReason, detail: str) -> None:
    log.warning("hook message dropped (%s): %s", reason, detail)


def with_missed_scripts(collector: Collector, outbox: Outbox, jobs: list[Job],
                        starts: set[int]) -> list[Job]:
    """An end is asked without its batch script: the outbox holds the run's start,
    script included, and puts it into the stop (``Outbox.enqueue``), so the script
    would cost slurmctld a request per job for nothing. Only the scripts of ends whose
    start the outbox lacks (its hook message was lost, or it came before the daemon)
    are asked, in one more question."""
    ends = [job for job in jobs if job.started and not job.job_script
            and not starts.intersection(job.slurm_ids)]
    if not ends or not collector.settings.fetch_job_scripts:
        return jobs
    # a fast path serves one cluster: its jobs all carry that cluster's name
    known = outbox.known_starts([(j.job_id, j.start_time) for j in ends], ends[0].cluster)
    scripts = collector.slurmctld.scripts(
        [j.job_id for j in ends if (j.job_id, j.start_time) not in known])
    return [replace(job, job_script=scripts[job.job_id]) if job.job_id in scripts else job
            for job in jobs]


Pending = dict[int, tuple[set[HookEvent], int, float]]  # id -> (events, attempts, due)


def move_due_later(later: list[tuple[float, int, HookEvent, int]], pending: Pending,
                   now: float) -> None:
    """Retries whose delay is over (``later``, a heap) join the pending jobs, due at once."""
    while later and later[0][0] <= now:
        _, job_id, event, attempts = heapq.heappop(later)
        events, _, _ = pending.get(job_id, (set(), attempts, now))
        pending[job_id] = (events | {event}, attempts, now)


def take_parts(pending: Pending, asked: set[int], free: int, now: float, burst: float,
               prefer_dump: Callable[[int], bool]) -> list[dict[int, tuple[set[HookEvent], int]]]:
    """Parts for the ``free`` slots, taken out of ``pending``: the starts due now or within
    ``burst`` (a burst in parts of about equal size, one per free slot), and every end, in a
    part of its own in a slot left over, once one is due or when starts are taken (an end
    can be asked any time; nobody waits for it). A job being asked (``asked``) waits for its
    answer: it is never asked in two slots at once (an end while its start is asked). A
    start announced a moment ago waits for the next query (where its nodes may boot,
    slurmctld still configures it: :meth:`FastPath._settle`). A burst for which a dump of
    every job is cheaper than single questions (``prefer_dump``:
    :class:`~ccadapter.slurm.controller.RouteCosts`, e.g. a 1,000-task array) is one part,
    so one dump."""
    ready = {i: entry for i, entry in pending.items() if i not in asked}
    starts = sorted(i for i, (kinds, _, due) in ready.items()
                    if "start" in kinds and due <= now + burst)
    ends = sorted(i for i, (kinds, _, _) in ready.items() if "start" not in kinds)
    count = 1 if prefer_dump(len(starts)) else free
    ids = [starts[k::count] for k in range(min(count, len(starts)))]
    if ends and len(ids) < free and (ids or min(ready[i][2] for i in ends) <= now + burst):
        ids.append(ends)
    parts = []
    for part in ids:
        parts.append({i: pending[i][:2] for i in part})
        for i in part:
            del pending[i]
    return parts
