"""Delivering one outbox event to cc-backend's REST API: the answers followed to a final
result (:class:`RestDelivery`), for :class:`ccadapter.daemon.deliverer.Deliverer` to record."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ccadapter.cc.client import Answer, CcBackendError, Outcome
from ccadapter.errors import CcAdapterError
from ccadapter.model import EventKind
from ccadapter.outbox import NOT_HELD, DeliveryStatus, Event, Result
from ccadapter.outbox.store import Store
from ccadapter.report.loggate import LogGate

log = logging.getLogger(__name__)


class Sender(Protocol):
    def send(self, kind: EventKind, body: dict) -> Answer: ...


# cc-backend answers an energy edit 422 while it has no such job in its job table (a stop it
# received over NATS and has not applied yet) and 500 when it stored the value but could not
# update the job's archive (v1.5.4 ``UpdateMetadata`` in repository/job.go and in
# pkg/archive/archive.go: the archiver is still writing it, failed, or monitoring is off for
# the job). Both are "not yet": retried with the event's own backoff (the answer is no sign
# that cc-backend is down), until ENERGY_PATIENCE seconds after its stop was delivered; one
# that still gets either then is rejected with cc-backend's answer (``queue retry`` sends it
# again). The real cc-backend 1.5.4 of the test bed takes an edit within a second of the
# stop, bursts of thousands of stops included (BENCHMARKS.md, "Energy edits after a stop");
# a site whose archiver loads metric data from a remote store takes longer, hence an hour.
# Other failures (cc-backend down) are retried for as long as it takes, like every event.
ENERGY_PATIENCE = 3600.0
_ENERGY_NOT_YET = frozenset({422, 500})

# cc-backend's 422 to a stop of a run it holds stopped (internal/api/job.go
# checkAndHandleStopJob). Our own stop sent again names our state; another state (or another
# duration) means cc-backend applied someone else's stop to this run: cc-backend 1.5.4 does
# that when its commit worker moves the job cache while a stop waits for the repository lock
# (the stop then takes a stale row id; README, Troubleshooting). The run is deleted there and
# sent again (:meth:`RestDelivery._replace`).
_STOPPED_AS = re.compile(r"job has already been stopped \(state is: (\w+)\)")
# cc-backend's 422 to a start of a job id it holds a run of from less than a day before, or
# of this very run (internal/api/job.go startJob): the job it found.
_DUPLICATE = re.compile(r"already exists: dbid: (\d+)")
_RUN_KINDS = frozenset({EventKind.START, EventKind.STOP})
ADOPT_KEY = "adopt-before"
ADOPT_SPAN = 3600  # seconds of start times asked of cc-backend at once after a switch
ORIGIN_KEY = "slurm-window.origin"  # reconcilers.slurm_window's first window (any cluster)
ADOPTED = "held already: "  # the note of an event cc-backend had before this outbox


class RestDelivery:
    """One event to cc-backend, following its answers to a final result. A failure that
    repeats for every event (cc-backend down, the token refused) is logged once a minute,
    not once per event: each event's own error is kept in the outbox (``queue list``)."""

    def __init__(self, sender: Sender, token_where: str = "ccRestJwt",
                 clock: Callable[[], float] = time.time, adopt_before: float = 0.0,
                 renumber: Callable[[dict], dict] | None = None,
                 held_instead: Callable[[str, int, int], int | None] | None = None) -> None:
        """``token_where``: where the token comes from, as a refusal names it
        (:attr:`ccadapter.cc.token.TokenSource.where`). ``adopt_before``: runs that started
        before it may be in cc-backend already (:func:`adopt_before`). ``renumber``: a
        start body in cc-backend's numbering of its resources, as it is sent (the outbox
        keeps Slurm's: :mod:`ccadapter.numbering.renumber`). ``held_instead``: see
        :func:`ccadapter.outbox.events.run_held_instead`."""
        self.sender = sender
        self.held_instead = held_instead
        self.renumber = renumber
        self.adopt_before = adopt_before
        self._adopt_cache: dict[tuple[str, int], dict[tuple[int, int], str]] = {}
        self._adopt_lock = threading.Lock()
        self.token_where = token_where
        self.clock = clock
        self._gate = LogGate(clock=clock)
        # requeued runs cc-backend holds no job of: the first said, then hourly with a count
        self._held_gate = LogGate(3600.0, clock)
        self._held_quiet = 0
        self._held_lock = threading.Lock()

    def __call__(self, event: Event) -> Result:
        if event.kind in _RUN_KINDS and event.start_time < self.adopt_before and \
                (held := self._adopted(event)):
            return held
        if event.kind == EventKind.STOP:
            return self._deliver_stop(event)
        answer = self._send(event.kind, event.payload)
        if event.kind == EventKind.START and (held := self._held_instead(event, answer)):
            note = f"{NOT_HELD}{_refused(event, held)}"
            self._say_not_held(note)
            return Result(event.id, DeliveryStatus.DELIVERED, note)
        return self._result(event, answer)

    def _send(self, kind: EventKind, body: dict) -> Answer:
        if kind == EventKind.START and self.renumber is not None:
            body = self.renumber(body)
        return self.sender.send(kind, body)

    def _adopted(self, event: Event) -> Result | None:
        """A run that started before this outbox was first used, where a lastRun was there
        already, may be in cc-backend: cc-slurm-adapter sent it before the switch (or an
        outbox since lost did). Its start, and its stop where cc-backend holds it stopped,
        are taken as delivered instead of being sent again for a 422. cc-backend is asked
        for the runs of a whole hour of start times at once (:data:`ADOPT_SPAN`), once: a
        catch-up of days after a switch costs a request per hour, not per run. A run
        cc-backend does not hold, or where it cannot be asked, is sent."""
        held = self._held_runs(event.cluster, event.start_time)
        state = held.get((event.job_id, event.start_time)) if held is not None else None
        if state is None or (event.kind == EventKind.STOP and state == "running"):
            return None
        log.debug("%s of job %d (%s, start %d): cc-backend holds it already (%s), sent before "
                  "this outbox", event.kind, event.job_id, event.cluster, event.start_time,
                  state)
        return Result(event.id, DeliveryStatus.DELIVERED,
                      f"{ADOPTED}cc-backend held it {state} before this outbox was used")

    def _held_runs(self, cluster: str, start: int) -> dict[tuple[int, int], str] | None:
        """(jobId, startTime) -> jobState of the runs cc-backend holds that started in the
        hour of ``start`` (up to the switch), read once; None where it cannot be read."""
        lookup = getattr(self.sender, "listed_runs", None)
        if lookup is None:
            return None
        lo = start - start % ADOPT_SPAN
        with self._adopt_lock:
            if (cluster, lo) not in self._adopt_cache:
                hi = min(lo + ADOPT_SPAN - 1, int(self.adopt_before))
                try:
                    runs = lookup(cluster, (lo, hi))
                except CcAdapterError:
                    return None  # asked again for the next event of that hour
                self._adopt_cache[(cluster, lo)] = {run: state for run, (state, _) in
                                                    runs.items()}
            return self._adopt_cache[(cluster, lo)]

    def _say_not_held(self, note: str) -> None:
        """The first requeued run not held, then hourly the latest and how many came since
        (each kept with its event: ``queue list``; counted by ``status``)."""
        with self._held_lock:
            if not self._held_gate.allow("not held"):
                self._held_quiet += 1
                return
            since, self._held_quiet = self._held_quiet, 0
        more = f" ({since} more such run(s) in the last hour: `ccadapter status`)" * bool(since)
        log.warning("%s; its times, nodes and state go into that job's metaData once it "
                    "ends%s", note, more)

    def _held_instead(self, event: Event, answer: Answer) -> int | None:
        """When cc-backend answered this run's start 422 because it holds another run of
        the job id from less than a day before (cc-backend 1.5.4 startJob's duplicate rule,
        internal/api/job.go), that run's start time, read from the job the answer names
        (``dbid: N``); None for a 422 that means this run is held already, and when it
        cannot be told."""
        found = _DUPLICATE.search(answer.detail) if answer.status == 422 else None
        lookup = getattr(self.sender, "job_start", None)
        if found is None or lookup is None:
            return None
        start = lookup(int(found.group(1)))
        return start if start is not None and start != event.start_time else None

    def _deliver_stop(self, event: Event) -> Result:
        start, known = event.payload.get("start"), self.held_instead  # its start refused:
        if start and known and (held := known(event.cluster, event.job_id, event.start_time)):
            return self._note_on_held(event, held, start)  # no stop (404), no start (422)
        answer = self.sender.send(EventKind.STOP, event.payload["stop"])
        if answer.status == 422 and (wrong := self._held_otherwise(event, answer)):
            return self._replace(event, wrong)
        if answer.outcome is not Outcome.NEEDS_START:
            return self._result(event, answer)
        return self._start_then_stop(event)

    def _start_then_stop(self, event: Event) -> Result:
        """cc-backend has no such run (it never saw it, or it was just deleted there): its
        start first, then the stop again."""
        start = event.payload.get("start")
        if not start:
            return Result(event.id, DeliveryStatus.REJECTED,
                          "stop answered 404 and no start body is known")
        first = self._send(EventKind.START, start)
        if held := self._held_instead(event, first):
            return self._note_on_held(event, held, start)
        if first.outcome is not Outcome.DELIVERED:
            return self._result(event, first, note="start before stop: ")
        log.info("job %d (%s): start delivered late, before its stop", event.job_id,
                 event.cluster)
        again = self.sender.send(EventKind.STOP, event.payload["stop"])
        if again.outcome is Outcome.NEEDS_START:
            return Result(event.id, DeliveryStatus.REJECTED,
                          f"cc-backend has no run of job {event.job_id} starting at "
                          f"{event.start_time}, even after its start was accepted "
                          f"(HTTP {first.status}); another run within 24 h? {again.detail}")
        return self._result(event, again)

    def _held_otherwise(self, event: Event, answer: Answer) -> str:
        """Why cc-backend, which answered our stop "already stopped", holds this run
        otherwise than Slurm ended it ("" when it holds it as our stop said, or cannot be
        asked): another run's stop was applied to it (:data:`_STOPPED_AS`). The state is in
        the answer; the duration is asked (one ``GET /api/jobs/?start-time=S-S``). A run
        stopped so has its archive written under the other run's path, and cc-backend
        answers 500 to every job list that holds it: that answer says it too."""
        held = _STOPPED_AS.search(answer.detail)
        stop = event.payload["stop"]
        ours, ended = stop.get("jobState"), stop.get("stopTime")
        if held is None or ours is None:
            return ""
        if held.group(1) != ours:
            return f"stopped as {held.group(1)}, Slurm ended it {ours}"
        lookup = getattr(self.sender, "listed_runs", None)
        if lookup is None or not isinstance(ended, int):
            return ""
        try:
            runs = lookup(event.cluster, (event.start_time, event.start_time))
        except CcBackendError as exc:
            return "listed by none of its job lists (HTTP 500: its archive is not where " \
                   "its row says)" if exc.status == 500 else ""
        length = runs.get((event.job_id, event.start_time), ("", None))[1]
        if isinstance(length, int) and length != ended - event.start_time:
            return f"stopped after {length} s, Slurm ended it after {ended - event.start_time} s"
        return ""

    def _replace(self, event: Event, wrong: str) -> Result:
        """A run cc-backend holds with another run's stop (cc-backend 1.5.4's stop/commit
        race, README "Troubleshooting"): no API corrects a stopped job, so it is deleted
        there (``DELETE /api/jobs/delete_job/``: its row; the archive written for it is the
        other run's) and sent again, start and stop, from the outbox's bodies. Without a
        start body it is said and left as it is."""
        what = (f"cc-backend held job {event.job_id} ({event.cluster}, start "
                f"{event.start_time}) {wrong}: another run's stop was applied to it "
                f"(cc-backend 1.5.4 stops the wrong job when its job cache is committed "
                f"during a stop)")
        delete = getattr(self.sender, "delete_run", None)
        if not event.payload.get("start") or delete is None:
            log.error("%s; correct it in cc-backend", what)
            return Result(event.id, DeliveryStatus.DELIVERED, f"{what}; correct it in cc-backend")
        gone = delete(event.cluster, event.job_id, event.start_time)
        if gone.outcome is Outcome.REJECTED:
            log.error("%s; deleting it there was refused (HTTP %d %s): correct it in "
                      "cc-backend", what, gone.status, gone.detail)
            return Result(event.id, DeliveryStatus.DELIVERED, f"{what}; correct it in cc-backend")
        if gone.outcome is not Outcome.DELIVERED:
            return self._result(event, gone, note="deleting a run held wrong: ")
        log.warning("%s; deleted there and sent again, start and stop", what)
        return self._start_then_stop(event)

    def _result(self, event: Event, answer: Answer, note: str = "") -> Result:
        what = (f"nodestate of {event.cluster}" if event.kind == EventKind.NODESTATE else
                f"{event.kind} of job {event.job_id} ({event.cluster}, start {event.start_time})")
        if answer.outcome is Outcome.DELIVERED:
            log.debug("delivered %s: HTTP %d", what, answer.status)
            return Result(event.id, DeliveryStatus.DELIVERED)
        if answer.outcome is Outcome.REJECTED:
            log.error("cc-backend rejected %s: HTTP %d %s", what, answer.status, answer.detail)
            return Result(event.id, DeliveryStatus.REJECTED,
                          f"{note}HTTP {answer.status}: {answer.detail}")
        if event.kind == EventKind.ENERGY and answer.status in _ENERGY_NOT_YET:
            return self._energy_not_yet(event, answer, what)
        # the same problem for every event: keyed by the status (and the transport error)
        said = self._gate.allow(f"{answer.status} {answer.detail if not answer.status else ''}")
        if answer.outcome is Outcome.AUTH and said:
            log.error("cc-backend refused our token (HTTP %d) for %s: check %s; the event "
                      "waits and goes out once a token is taken", answer.status, what,
                      self.token_where)
        elif event.kind == EventKind.NODESTATE and answer.status == 0:
            log.debug("nodestate not delivered: %s", answer.detail)
        elif said:
            log.warning("%s not delivered, will retry: HTTP %d %s (said once a minute)", what,
                        answer.status, answer.detail)
        return Result(event.id, DeliveryStatus.PENDING,
                      f"{note}HTTP {answer.status}: {answer.detail}")

    def _note_on_held(self, event: Event, held: int, start: dict) -> Result:
        """A run cc-backend holds no job of has ended: what can be held of it -- its times,
        nodes and state -- goes into the metaData of the job it holds for that job id
        (``PATCH /api/jobs/edit_meta/``, key ``requeuedRun.START``)."""
        stop = event.payload["stop"]
        key = f"requeuedRun.{event.start_time}"
        answer = self.sender.send(EventKind.ENERGY, {  # an edit of metaData, as energy's
            "jobId": event.job_id, "cluster": event.cluster, "startTime": held,
            "payload": {"key": key, "value": run_summary(start, stop)}})
        if answer.outcome is Outcome.DELIVERED:
            log.debug("job %d (%s): its run of %d is in the metaData of the run of %d (%s)",
                      event.job_id, event.cluster, event.start_time, held, key)
            return Result(event.id, DeliveryStatus.DELIVERED,
                          f"{NOT_HELD}{_refused(event, held)}; its times, nodes and state "
                          f"are in that job's metaData.{key}")
        if answer.status in _ENERGY_NOT_YET:  # that job is being archived
            return self._energy_not_yet(event, answer, f"metaData.{key} of job "
                                                       f"{event.job_id}")
        return self._result(event, answer, note="requeued run into metaData: ")

    def _energy_not_yet(self, event: Event, answer: Answer, what: str) -> Result:
        """An energy edit cc-backend could not apply yet (see :data:`ENERGY_PATIENCE`)."""
        error = f"HTTP {answer.status}: {answer.detail}"
        waited = self.clock() - (event.after or event.created_at)
        if waited >= ENERGY_PATIENCE:
            log.error("cc-backend did not take %s in %.0f min after its stop (%d attempts): "
                      "%s", what, waited / 60, event.attempts + 1, error)
            return Result(event.id, DeliveryStatus.REJECTED,
                          f"gave up {waited / 60:.0f} min after the stop, "
                          f"{event.attempts + 1} attempts: {error}")
        log.debug("%s not taken yet, will retry: %s", what, error)
        return Result(event.id, DeliveryStatus.PENDING, error, waiting=True)


def adopt_before(store: Store, last_run_there: bool, now: float) -> float:
    """Before when a run's start and stop may be in cc-backend without this outbox having
    sent them: the moment the outbox was first used where a lastRun file was there already
    (a site switching from cc-slurm-adapter, which writes the same file; an outbox lost and
    made anew), else 0. Kept in the outbox (key ``adopt-before``), decided once: before its
    first window ran."""
    value = store.get_state(ADOPT_KEY)
    if value is None:
        fresh = not any(key.endswith(ORIGIN_KEY) for key in store.state_items(""))
        value = repr(now if fresh and last_run_there else 0.0)
        store.set_state(ADOPT_KEY, value)
    return float(value)


def _refused(event: Event, held: int) -> str:
    return (f"cc-backend holds the run of job {event.job_id} ({event.cluster}) that started at "
            f"{_iso(held)} and refuses this run of {_iso(event.start_time)} (cc-backend 1.5.4 "
            "holds one run of a job id a day)")


def run_summary(start: dict, stop: dict) -> str:
    """A run in one line, for the metaData of another: times, length, state, hosts."""
    began, ended = int(start.get("startTime") or 0), int(stop.get("stopTime") or 0)
    hosts = ",".join(r.get("hostname", "") for r in start.get("resources") or ())
    return (f"{_iso(began)} to {_iso(ended)} ({max(0, ended - began)} s), "
            f"{stop.get('jobState', '?')}, on {hosts or '?'}")


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
