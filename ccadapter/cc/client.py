"""cc-backend REST client: sends bodies, classifies answers. Never decides what to send.

The meaning of each answer is data (:func:`classify`), in one place:

=========  ==========================  ===============================================
kind       status                      outcome
=========  ==========================  ===============================================
start      201, 422 (already there)    delivered
start      500 "UNIQUE constraint      delivered: the run waits in cc-backend 1.5's job
           failed: job_cache..."       cache, where a start sent before put it
stop       200, 422 (already stopped)  delivered
stop       404 (never saw the job)     needs_start: deliver its start, then the stop
energy     200                         delivered
energy     422 (no such job yet)       retry later (a stop cc-backend has not applied)
any        5xx, timeout, no connection retry later (exponential backoff, jitter)
any        401, 403                    auth: a configuration error, said plainly
any        other 4xx                   rejected: parked with the body, not retried
=========  ==========================  ===============================================

Every kind is a POST of a JSON body, but ``energy``: a PATCH of ``/api/jobs/edit_meta/``
(cc-backend v1.5.4 internal/api/rest.go ``MountAPIRoutes``, job.go ``editMetaByRequest``).

The JWT is sent in ``X-Auth-Token`` and never appears in logs or exceptions; it comes from a
:class:`~ccadapter.cc.token.TokenSource`, which takes a rotated ``ccRestJwtFile`` while the
daemon runs: a request refused with 401 or 403 is sent once more at once when the file holds
another token by then.
Transport: :mod:`ccadapter.cc.http` (requests, one pool of keep-alive connections sized to
the delivery workers).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode

from tenacity import retry_if_result

from ccadapter.cc.http import HttpSession, Reply, TransportError
from ccadapter.cc.token import TokenSource
from ccadapter.config.secrets import safe_url
from ccadapter.errors import CcAdapterError
from ccadapter.model import EventKind
from ccadapter.retry import RetryPolicies, RetryPolicy

log = logging.getLogger(__name__)

_PATHS = {EventKind.START: "/api/jobs/start_job/", EventKind.STOP: "/api/jobs/stop_job/",
          EventKind.NODESTATE: "/api/nodestate/", EventKind.ENERGY: "/api/jobs/edit_meta/"}
_METHODS = {EventKind.ENERGY: "PATCH"}  # the others: POST


class Outcome(StrEnum):
    DELIVERED = "delivered"
    NEEDS_START = "needs_start"
    RETRY = "retry"
    AUTH = "auth"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    status: int  # 0 when there was no HTTP answer
    detail: str  # response body or the transport error, cut to 500 characters


# cc-backend 1.5 inserts a new job into its job cache without looking there for duplicates
# (internal/api/job.go ``startJob``; repository/jobFind.go ``FindAll`` reads `job` only): a
# start sent again before the commit worker moved the first one is refused by the cache's
# UNIQUE (job_id, cluster, start_time) constraint (migrations/sqlite3/09_add-job-cache.up.sql)
# with this text in a 500. The run is in cc-backend: retrying would only repeat the 500
# until the commit (up to two minutes of requests).
_CACHED_START = "UNIQUE constraint failed: job_cache."


def classify(kind: EventKind, status: int, body: str = "") -> Outcome:
    """What an HTTP answer means for an event of this kind. Pure."""
    if kind == EventKind.START and status == 500 and _CACHED_START in body:
        return Outcome.DELIVERED
    if status == 0 or status >= 500 or status in (408, 429):
        return Outcome.RETRY
    if status in (401, 403):
        return Outcome.AUTH
    if kind == EventKind.START and status in (200, 201, 422):
        return Outcome.DELIVERED
    if kind == EventKind.STOP and status in (200, 422):
        return Outcome.DELIVERED
    if kind == EventKind.STOP and status == 404:
        return Outcome.NEEDS_START
    if kind == EventKind.NODESTATE and 200 <= status < 300:
        return Outcome.DELIVERED
    if kind == EventKind.ENERGY and status == 200:
        return Outcome.DELIVERED
    if kind == EventKind.ENERGY and status == 422:  # finding job failed (editMetaByRequest)
        return Outcome.RETRY
    return Outcome.REJECTED


class CcBackendError(CcAdapterError):
    """cc-backend could not be asked (or answered an error) for a read request. The
    message names the address, what failed and what to do; ``status`` is cc-backend's HTTP
    status (0 when it gave no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


# What an operator does when cc-backend gave no answer, by TransportError.kind.
_TRANSPORT_ADVICE = {
    "refused": "is cc-backend running there? check ccRestUrl",
    "timeout": "cc-backend is overloaded or out of reach: check it and the network",
    "untrusted": "set ccRestCaBundle to the CA that signed cc-backend's certificate",
    "tls": "does that port speak TLS? (https:// needs it, http:// must not)",
    "dns": "check the host name in ccRestUrl",
    "proxy": "check HTTPS_PROXY, HTTP_PROXY and NO_PROXY",
    "lost": "cc-backend closed the connection: see its log",
    "other": "check cc-backend and the network",
}


def _status_advice(status: int, token: str = "ccRestJwt") -> str:
    """What to do about an error answer; ``token``: where the token came from."""
    if status in (401, 403):
        return f"cc-backend refused our token: check {token} (expired? no api role?)"
    if status == 404:
        return "no such API there: is ccRestUrl cc-backend's base URL?"
    return "see cc-backend's log"


class CcClient:
    """cc-backend's REST API over keep-alive connections, TLS verified."""

    def __init__(
        self,
        url: str,
        jwt: str | TokenSource,
        *,
        ca_bundle: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        pool_size: int = 16,
        on_request: Callable[[str, int, float], None] | None = None,
    ) -> None:
        """``pool_size``: how many requests may be in flight at once (the delivery workers
        and a reconciler). ``on_request(endpoint, status, seconds)`` hears of every HTTP
        exchange, quick retries included; status 0 when there was no answer (the daemon's
        metrics)."""
        self.url = url.rstrip("/")
        self.retry = retry or RetryPolicies().http
        self.on_request = on_request
        # the latest request that got nowhere, said for an operator (one-shot commands
        # report it after their delivery); None until one failed
        self.last_problem: str | None = None
        self.token = jwt if isinstance(jwt, TokenSource) else TokenSource.fixed(jwt)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self._http = HttpSession(self.url, headers, pool_size=pool_size,
                                 connect_timeout=connect_timeout, read_timeout=read_timeout,
                                 ca_bundle=ca_bundle)
        # one tenacity loop for every send, not one made per event (a cost in every
        # delivery); its per-call state is thread-local, so the delivery workers share it
        self._retrying = self.retry.retrying(
            retry=retry_if_result(lambda a: a.outcome is Outcome.RETRY and a.status != 0),
            retry_error_callback=lambda state: state.outcome.result())

    def __repr__(self) -> str:  # the headers hold the JWT: keep it out of reprs
        return f"CcClient({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def send(self, kind: EventKind, body: dict[str, Any]) -> Answer:
        """Send one event (POST; PATCH for ``energy``). A few quick retries absorb blips
        (5xx); longer outages are the outbox's business (it reschedules the event with
        growing delays)."""
        return self._retrying(self._post, kind, body)

    def _post(self, kind: EventKind, body: dict[str, Any]) -> Answer:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        what = f"{_METHODS.get(kind, 'POST')} {_PATHS[kind]}"
        try:
            resp = self._request(_METHODS.get(kind, "POST"), _PATHS[kind], data)
        except TransportError as exc:
            self.last_problem = self._problem(what, str(exc), _TRANSPORT_ADVICE[exc.kind])
            return Answer(Outcome.RETRY, 0, str(exc))
        text = resp.data[:500].decode("utf-8", "replace").strip()
        outcome = classify(kind, resp.status, text)
        if outcome in (Outcome.RETRY, Outcome.AUTH):
            self.last_problem = self._problem(what, f"HTTP {resp.status}",
                                              _status_advice(resp.status, self.token.where))
        return Answer(outcome, resp.status, text)

    def _problem(self, what: str, reason: str, advice: str) -> str:
        return f"cc-backend {safe_url(self.url)} (ccRestUrl): {what}: {reason}; {advice}"

    def job_start(self, db_id: int) -> int | None:
        """The startTime of cc-backend's job ``db_id`` (``GET /api/jobs/{id}``); None when
        it cannot be read (an error, another server's answer)."""
        try:
            resp = self._request("GET", f"/api/jobs/{int(db_id)}", None)
            start = json.loads(resp.data)["Meta"]["startTime"] if resp.status == 200 else None
        except (TransportError, ValueError, KeyError, TypeError):
            return None
        return start if isinstance(start, int) and not isinstance(start, bool) else None

    def clusters(self) -> Any:
        """cc-backend's cluster configuration (``GET /api/clusters/``: every cluster.json
        of its job archive, topologies included), decoded; raises :class:`CcBackendError`
        when it cannot be had."""
        try:
            resp = self._request("GET", "/api/clusters/", None)
        except TransportError as exc:
            raise CcBackendError(f"GET /api/clusters/: {exc}") from None
        if resp.status != 200:
            raise CcBackendError(f"GET /api/clusters/ answered HTTP {resp.status}",
                                 resp.status)
        try:
            return json.loads(resp.data)
        except ValueError:
            raise CcBackendError("GET /api/clusters/ answered with no JSON",
                                 resp.status) from None

    def delete_run(self, cluster: str, job_id: int, start_time: int) -> Answer:
        """Remove one run from cc-backend's job table (``DELETE /api/jobs/delete_job/``,
        by jobId, cluster and startTime; its archive stays). Only for a run cc-backend holds
        with another run's stop (:mod:`ccadapter.cc.rest_delivery`), sent again at once:
        delivered for 200, and for 422 (it holds no such run any more)."""
        body = json.dumps({"jobId": job_id, "cluster": cluster, "startTime": start_time}
                          ).encode()
        try:
            resp = self._request("DELETE", "/api/jobs/delete_job/", body)
        except TransportError as exc:
            return Answer(Outcome.RETRY, 0, str(exc))
        text = resp.data[:500].decode("utf-8", "replace").strip()
        outcome = Outcome.DELIVERED if resp.status in (200, 422) else \
            classify(EventKind.STOP, resp.status, text)
        return Answer(Outcome.REJECTED if outcome is Outcome.NEEDS_START else outcome,
                      resp.status, text)

    def running_jobs(self, cluster: str, per_page: int = 500) -> list[dict[str, Any]]:
        """All running jobs of a cluster (every page in one list; for small clusters and
        tests: :meth:`running_job_pages` keeps one page at a time)."""
        return [job for page in self.running_job_pages(cluster, per_page) for job in page]

    def running_runs(self, cluster: str, per_page: int = 500,
                     start_time: tuple[int, int] | None = None) -> Iterator[tuple[int, int]]:
        """The runs (jobId, startTime) cc-backend lists running (``start_time``: those
        started in that range, both ends included), checked: an entry that is no job with
        integer ``jobId`` and ``startTime`` raises, naming it and the page, as any error
        answer does (it must not be read as a run, nor as no run)."""
        for run, _ in self._runs(self.running_job_pages(cluster, per_page, start_time)):
            yield run

    def listed_runs(self, cluster: str, start_time: tuple[int, int], per_page: int = 500
                    ) -> dict[tuple[int, int], tuple[str, Any]]:
        """Every run cc-backend lists of those started in ``start_time`` (both ends
        included), whatever its state: (jobId, startTime) -> (jobState, duration); checked
        as :meth:`running_runs` checks."""
        return dict(self._runs(self.running_job_pages(cluster, per_page, start_time,
                                                      state=None)))

    def _runs(self, pages: Iterator[list[dict[str, Any]]]
              ) -> Iterator[tuple[tuple[int, int], tuple[str, Any]]]:
        for number, page in enumerate(pages, 1):
            for job in page:
                run = job_run(job)
                if run is None:
                    raise CcBackendError(self._problem(
                        f"GET /api/jobs/ page {number}",
                        f"an entry without an integer jobId and startTime: {str(job)[:120]!r}",
                        "is ccRestUrl cc-backend's base URL, and is it cc-backend 1.5?"))
                yield run, (str(job.get("jobState", "")), job.get("duration"))

    def running_job_pages(self, cluster: str, per_page: int = 500,
                          start_time: tuple[int, int] | None = None,
                          state: str | None = "running") -> Iterator[list[dict[str, Any]]]:
        """The running jobs of a cluster (started in ``start_time``, if given: cc-backend's
        ``start-time=FROM-TO``), one page at a time, so that a caller keeping a few fields
        of each holds one page in memory, not 100,000 jobs. Raises on any error: an error
        answer must never be read as "no jobs running"."""
        page = 1
        while True:
            query = urlencode({**({"state": state} if state else {}), "cluster": cluster,
                               "items-per-page": per_page, "page": page,
                               **({"start-time": f"{start_time[0]}-{start_time[1]}"}
                                  if start_time else {})})
            what = f"GET /api/jobs/ page {page}"
            try:
                resp = self._request("GET", f"/api/jobs/?{query}", None)
            except TransportError as exc:
                raise CcBackendError(self._problem(what, str(exc),
                                                   _TRANSPORT_ADVICE[exc.kind])) from None
            if resp.status != 200:
                answer = " ".join(resp.data[:200].decode("utf-8", "replace").split())
                raise CcBackendError(self._problem(what, f"HTTP {resp.status} {answer}",
                                                   _status_advice(resp.status,
                                                                  self.token.where)),
                                     resp.status)
            try:
                batch = json.loads(resp.data)["jobs"]
            except (ValueError, KeyError, TypeError):
                batch = None
            if not isinstance(batch, list):
                raise CcBackendError(self._problem(what, "not a job list",
                                                   "is ccRestUrl cc-backend's base URL?"))
            yield batch
            if len(batch) < per_page:
                return
            page += 1

    def _request(self, method: str, path: str, body: bytes | None) -> Reply:
        """One exchange with the token of now; refused (401, 403) while the token's file
        holds another one by now (rotated), once more with that one."""
        sent = self.token.current()
        reply = self._exchange(method, path, body, sent)
        if reply.status in (401, 403) and self.token.refused(sent):
            reply = self._exchange(method, path, body, self.token.current())
        return reply

    def _exchange(self, method: str, path: str, body: bytes | None, token: str) -> Reply:
        """One exchange, timed for ``on_request`` under its endpoint (:func:`endpoint`)."""
        started = time.monotonic()
        status = 0
        auth = {"X-Auth-Token": token}
        try:
            reply = self._http.get(path, auth) if method == "GET" else \
                self._http.post(path, body or b"", method, auth)
            status = reply.status
            return reply
        finally:
            if self.on_request:
                self.on_request(endpoint(path), status, time.monotonic() - started)


def endpoint(path: str) -> str:
    """The path without its query, a job's database id as ``{id}``: the metrics label
    requests by it, and one label per job looked up (``GET /api/jobs/{id}``, a requeued
    run's 422) would grow the daemon's memory with every such job, for its whole life."""
    head, _, last = path.partition("?")[0].rstrip("/").rpartition("/")
    return f"{head}/{{id}}" if last.isdigit() else path.partition("?")[0]


def job_run(job: Any) -> tuple[int, int] | None:
    """(jobId, startTime) of one entry of cc-backend's job list; None when it has no such
    integers (a bool is no integer; JSON numbers with a fraction are not ids)."""
    if not isinstance(job, dict):
        return None
    job_id, start = job.get("jobId"), job.get("startTime")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (job_id, start)):
        return None
    return job_id, start


