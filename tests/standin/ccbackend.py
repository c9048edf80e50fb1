"""A stand-in for ClusterCockpit's cc-backend 1.5 REST API, as strict as the real server.

Serves, on 127.0.0.1 or ::1, the five endpoints ccadapter uses:

``POST|PUT /api/jobs/start_job/``
    Body decoded like cc-backend's ``decode()`` (Go ``DisallowUnknownFields``) into
    ``schema.Job``: an unknown field (also inside ``resources[]``, ``tags[]``, ...) or a value of
    the wrong JSON type (an integer must be an integer: no bool, float or string; int32 fields
    in int32 range) is ``400``. Then ``importer.SanityChecks``: known cluster, non-empty
    ``user`` and ``resources``, ``numNodes >= 1``, ``numHwthreads >= 0``, ``numAcc >= 0``,
    ``len(resources) == numNodes``; also ``400`` here: missing ``jobId``, missing or
    non-positive ``startTime``, an empty ``resources[].hostname``, ``shared`` outside
    none/single_user/multi_user, ``jobState`` not a job state. A run with the same ``jobId``
    and ``cluster`` as a stored one and ``new.startTime - old.startTime < 86400`` is ``422``
    (cc-backend compares signed: an *earlier* start is always a duplicate). Success: ``201``
    with ``{"msg": "success"}`` -- cc-backend 1.5 returns no database id; see ``jobs()``.
    The job is stored as ``running``, ``shared`` defaulting to ``none``.

``POST|PUT /api/jobs/stop_job/``
    Fields ``jobId`` (required), ``cluster``, ``startTime``, ``stopTime`` (required),
    ``jobState`` (required). The job is the newest (by database id) with that ``jobId``,
    filtered by ``cluster`` and ``startTime`` when given (cc-backend's ``Find``: without
    ``cluster`` any cluster matches). None: ``404``; not running: ``422``;
    ``stopTime < startTime``: ``400``; a ``jobState`` that is not a terminal state of
    cc-lib's ``JobState.Valid()`` (running, pending, suspended are refused too) -- ``400``.
    Note that cc-lib spells ``out_of_memory``; the swagger's ``out-of-memory`` is a
    documentation typo the real server refuses, so this stand-in refuses it as well.
    Success: ``200`` with the stopped job (``schema.Job`` JSON, ``duration`` set).

``POST|PUT /api/nodestate/``
    ``{"cluster": str, "nodes": [schema.NodePayload]}``, strict; ``cluster`` and every
    ``hostname`` must be non-empty. The latest list per cluster is kept (``node_states()``).
    Success: ``200`` with an *empty* body, as cc-backend 1.5 writes none.

``PATCH /api/jobs/edit_meta/`` (cc-backend v1.5.4 internal/api/job.go:503-534)
    ``JobMetaRequest`` (job.go:70-81): ``jobId`` (required), ``cluster``, ``startTime``,
    ``payload: {"key", "value"}``, strict. The job is found as stop_job finds it (the newest
    with that ``jobId``, filtered by ``cluster`` and ``startTime`` when given; none: ``422``
    ``finding job failed``), and ``metaData[key] = value`` is stored. Success: ``200`` with
    the job (``schema.Job`` JSON, ``metaData`` included). cc-backend then updates the job
    archive of a stopped job, and answers ``500`` with a plain-text error when its
    ``meta.json`` is not written yet -- after having stored the value
    (repository/job.go:301-310, pkg/archive/archive.go:374-390, fsBackend.go:77-82).
    ``archive_after(seconds)`` models the archiver taking that long after a stop (default
    ``None``: archived at once). Not modelled: cc-backend's job_cache (its ``Find`` reads
    only the job table, so a job never committed and not stopped is ``422`` there).

``GET /api/jobs/?state=..&cluster=..&project=..&start-time=FROM-TO&items-per-page=N&page=P``
    Unknown query parameters and invalid states are ``400``. Jobs sorted by descending
    ``startTime`` (ties: descending id), ``items-per-page`` default 25 (``-1``: all), ``page``
    default 1. Answer ``{"jobs": [...], "items": N, "page": P}`` where ``items`` is, as in
    cc-backend, the *requested page size*, not the number of jobs returned: a client pages
    until a page has fewer than N jobs. ``metaData`` is only filled with ``with-metadata``.

Every request needs ``X-Auth-Token: <token>`` (or ``Authorization: Bearer <token>``), else
``401``. Unknown paths are ``404``, a wrong method on a known path ``405``. Errors are
``{"status": "<reason>", "error": "<message>"}``.

Behaviour switches, thread-safe, settable while serving: ``fail_with(status)``,
``hang(seconds)``, ``drop_connections(on)``, ``latency(seconds)``, ``archive_after(seconds)``.
Every request is logged (``requests()``, ``count()``, ``started()``, ``stopped()``), dropped
ones with status 0.

Standalone (for benchmarks)::

    python -m tests.standin.ccbackend --port 8080 --token X --cluster c1 --cluster c2 \
        [--latency 0.005] [--host ::1] [--quiet]

prints ``listening on URL`` to stdout, logs requests to stderr, serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import re
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

SECONDS_PER_DAY = 86400

# cc-lib schema.JobState.Valid() of the cc-backend 1.5 line.
VALID_STATES = frozenset({
    "boot_fail", "cancelled", "completed", "deadline", "failed", "node_fail", "out_of_memory",
    "pending", "preempted", "running", "suspended", "timeout",
})
# What stop_job accepts: the states a job ends in.
STOP_STATES = VALID_STATES - {"running", "pending", "suspended"}
SHARED_VALUES = frozenset({"none", "single_user", "multi_user"})

START_PATH = "/api/jobs/start_job/"
STOP_PATH = "/api/jobs/stop_job/"
NODESTATE_PATH = "/api/nodestate/"
EDIT_META_PATH = "/api/jobs/edit_meta/"
JOBS_PATH = "/api/jobs/"

_JSON = "application/json"


# ---------------------------------------------------------------------------------------------
# Strict decoding, after Go's encoding/json with DisallowUnknownFields.


class BadRequest(Exception):
    """The body does not decode, or fails a sanity check: 400."""


Check = Callable[[Any, str], None]


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _mismatch(v: Any, where: str, go_type: str) -> BadRequest:
    if v is None:
        return BadRequest(f"json: null is not accepted for field {where} (type {go_type})")
    shown = f"number {v}" if _json_type(v) == "number" else _json_type(v)
    return BadRequest(f"json: cannot unmarshal {shown} into Go struct field {where} "
                      f"of type {go_type}")


def _int(bits: int) -> Check:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    go_type = f"int{bits}"

    def check(v: Any, where: str) -> None:
        if type(v) is not int or not lo <= v <= hi:
            raise _mismatch(v, where, go_type)

    return check


INT32 = _int(32)
INT64 = _int(64)


def STRING(v: Any, where: str) -> None:
    if type(v) is not str:
        raise _mismatch(v, where, "string")


def NUMBER(v: Any, where: str) -> None:
    if type(v) not in (int, float):
        raise _mismatch(v, where, "float64")


def _list_of(item: Check) -> Check:
    def check(v: Any, where: str) -> None:
        if type(v) is not list:
            raise _mismatch(v, where, "array")
        for i, x in enumerate(v):
            item(x, f"{where}[{i}]")

    return check


def _map_of(value: Check) -> Check:
    def check(v: Any, where: str) -> None:
        if type(v) is not dict:
            raise _mismatch(v, where, "map")
        for k, x in v.items():
            value(x, f"{where}[{k!r}]")

    return check


def _statistics(v: Any, where: str) -> None:
    # schema.JobStatisticsSet has its own (lenient) UnmarshalJSON: metric -> object, or
    # group -> array of objects.
    if type(v) is not dict:
        raise _mismatch(v, where, "JobStatisticsSet")
    for k, x in v.items():
        if type(x) is list:
            for i, inst in enumerate(x):
                if type(inst) is not dict:
                    raise _mismatch(inst, f"{where}[{k!r}][{i}]", "object")
        elif type(x) is not dict:
            raise _mismatch(x, f"{where}[{k!r}]", "JobStatistics")


class Struct:
    """A Go struct: known fields with their checks; anything else is an unknown field."""

    def __init__(self, name: str, fields: Mapping[str, Check]) -> None:
        self.name = name
        self.fields = dict(fields)

    def __call__(self, v: Any, where: str = "") -> None:
        if type(v) is not dict:
            raise _mismatch(v, where or self.name, self.name)
        fields = self.fields
        for key, x in v.items():
            check = fields.get(key)
            if check is None:
                raise BadRequest(f'json: unknown field "{key}"'
                                 + (f" in {where}" if where else ""))
            check(x, f"{where or self.name}.{key}")


RESOURCE = Struct("Resource", {
    "hostname": STRING, "configuration": STRING,
    "hwthreads": _list_of(INT64), "accelerators": _list_of(STRING),
})
TAG = Struct("Tag", {"type": STRING, "name": STRING, "scope": STRING, "id": INT64})
JOB_LINK = Struct("JobLink", {"id": INT64, "jobId": INT64})
JOB_LINK_LIST = Struct("JobLinkResultList", {"items": _list_of(JOB_LINK), "count": INT64})

# cc-lib schema.Job (cc-backend 1.5), with the Go types of its fields.
JOB = Struct("Job", {
    "cluster": STRING, "subCluster": STRING, "partition": STRING, "project": STRING,
    "user": STRING, "shared": STRING, "jobState": STRING,
    "tags": _list_of(TAG), "resources": _list_of(RESOURCE),
    "energyFootprint": _map_of(NUMBER), "footprint": _map_of(NUMBER),
    "metaData": _map_of(STRING), "concurrentJobs": JOB_LINK_LIST, "energy": NUMBER,
    "arrayJobId": INT64, "walltime": INT64, "requestedMemory": INT64, "jobId": INT64,
    "duration": INT32, "smt": INT32, "monitoringStatus": INT32, "numAcc": INT32,
    "numHwthreads": INT32, "numNodes": INT32, "statistics": _statistics, "id": INT64,
    "submitTime": INT64, "startTime": INT64,
})
STOP_REQUEST = Struct("StopJobAPIRequest", {
    "jobId": INT64, "cluster": STRING, "startTime": INT64, "jobState": STRING,
    "stopTime": INT64,
})
NODE_PAYLOAD = Struct("NodePayload", {
    "hostname": STRING, "states": _list_of(STRING), "cpusAllocated": INT64,
    "memoryAllocated": INT64, "gpusAllocated": INT64, "jobsRunning": INT64,
})
NODESTATE_REQUEST = Struct("UpdateNodeStatesRequest", {
    "cluster": STRING, "nodes": _list_of(NODE_PAYLOAD),
})
# cc-backend v1.5.4 internal/api/job.go:70-81
EDIT_META_REQUEST = Struct("EditMetaRequest", {"key": STRING, "value": STRING})
JOB_META_REQUEST = Struct("JobMetaRequest", {
    "jobId": INT64, "cluster": STRING, "startTime": INT64, "payload": EDIT_META_REQUEST,
})


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_json(raw: bytes) -> Any:
    """JSON as Go reads it: UTF-8, no NaN/Infinity; an empty body is EOF."""
    text = raw.decode("utf-8")
    if not text.strip():
        raise ValueError("EOF")
    return _DECODER.decode(text)


def decode_body(body: Any, parse_error: str | None, struct: Struct) -> dict[str, Any]:
    """Checks an already parsed body against a struct; the body is not modified."""
    if parse_error is not None:
        raise BadRequest(f"parsing request body failed: {parse_error}")
    try:
        struct(body)
    except BadRequest as e:
        raise BadRequest(f"parsing request body failed: {e}") from None
    return body


# ---------------------------------------------------------------------------------------------
# The request log.


class LoggedRequest(NamedTuple):
    """One request as the stand-in saw it. ``status`` 0: the connection was dropped."""

    time: float  # time.time() when the request had been read
    method: str
    path: str  # without the query string
    status: int
    body: Any  # the parsed JSON body, or None


# ---------------------------------------------------------------------------------------------
# The stand-in.


class CcBackendStandin:
    """An in-memory cc-backend 1.5 REST API on a ThreadingHTTPServer in a daemon thread."""

    def __init__(
        self,
        token: str = "test-token",
        clusters: Iterable[str] = ("cluster22", "cluster24", "cluster26"),
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        verbose: bool = False,
        keep_log: bool = True,
    ) -> None:
        """``clusters``: the names cc-backend knows; a mapping name -> hostnames also
        restricts which host a job's first resource may name (cc-backend's subcluster
        assignment), ``None`` as value allows any host. ``keep_log=False`` keeps no request
        log (long benchmark runs)."""
        self.token = token
        self.host = host
        self.port = port
        self.verbose = verbose
        self.keep_log = keep_log
        self._hosts: dict[str, frozenset[str] | None] = {}
        if isinstance(clusters, Mapping):
            for name, hosts in clusters.items():
                self._hosts[name] = None if hosts is None else frozenset(hosts)
        else:
            for name in clusters:
                self._hosts[name] = None
        self.url = ""
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

        self._lock = threading.Lock()  # storage and log
        self._log: list[LoggedRequest] = []
        self._jobs: dict[int, dict[str, Any]] = {}
        self._by_key: dict[tuple[str, int], list[int]] = {}
        self._by_jobid: dict[int, list[int]] = {}
        self._next_id = 1
        self._nodestates: dict[str, dict[str, Any]] = {}

        self._cond = threading.Condition()  # switches
        self._fail: int | None = None
        self._hang: float | None = None
        self._drop = False
        self._latency = 0.0
        self._archive_after: float | None = None
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def clusters(self) -> list[str]:
        return list(self._hosts)

    def start(self) -> CcBackendStandin:
        if self._server is not None:
            raise RuntimeError("already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._stopping = False
        server = _Server((self.host, self.port), _Handler, self, family)
        self._server = server
        port = server.server_address[1]
        self.port = port
        shown = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        self.url = f"http://{shown}:{port}"
        self._thread = threading.Thread(target=server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"ccbackend-standin:{port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        server.shutdown()  # no more accepts
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        server.close_connections()  # wakes handlers waiting on keep-alive connections
        server.join_workers(timeout=10)
        server.server_close()

    def __enter__(self) -> CcBackendStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- switches --------------------------------------------------------------------------------

    def fail_with(self, status: int | None) -> None:
        """Answer every request with this status (JSON error body) until ``None``."""
        with self._cond:
            self._fail = status

    def hang(self, seconds: float | None) -> None:
        """Hold every request this long before handling it; ``None`` releases them now."""
        with self._cond:
            self._hang = seconds
            self._cond.notify_all()

    def drop_connections(self, on: bool) -> None:
        """Close the connection instead of answering (the request is not handled)."""
        with self._cond:
            self._drop = bool(on)

    def latency(self, seconds: float) -> None:
        """Add this fixed delay to every request."""
        with self._cond:
            self._latency = max(0.0, float(seconds))

    def archive_after(self, seconds: float | None) -> None:
        """A job stopped from now on has its archive written this many seconds after its
        stop (edit_meta answers 500 before); ``None``: at once."""
        with self._cond:
            self._archive_after = seconds

    def reset(self) -> None:
        """Switches off, log, jobs and node states cleared."""
        with self._cond:
            self._fail, self._hang, self._drop, self._latency = None, None, False, 0.0
            self._archive_after = None
            self._cond.notify_all()
        with self._lock:
            self._log.clear()
            self._jobs.clear()
            self._by_key.clear()
            self._by_jobid.clear()
            self._nodestates.clear()

    # -- inspection ------------------------------------------------------------------------------

    def requests(self, path: str | None = None) -> list[LoggedRequest]:
        with self._lock:
            log = list(self._log)
        return log if path is None else [r for r in log if r.path == path]

    def count(self, path: str | None = None, status: int | None = None) -> int:
        return sum(1 for r in self.requests(path) if status is None or r.status == status)

    def started(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """Bodies of successful start_job requests, in order."""
        return [r.body for r in self.requests(START_PATH) if r.status == 201
                and (cluster is None or r.body.get("cluster") == cluster)]

    def stopped(self) -> list[dict[str, Any]]:
        """Bodies of successful stop_job requests, in order."""
        return [r.body for r in self.requests(STOP_PATH) if r.status == 200]

    def jobs(self, cluster: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """Stored jobs as cc-backend serializes them (with ``metaData``), by database id."""
        with self._lock:
            return [_job_json(j, with_meta=True) for _, j in sorted(self._jobs.items())
                    if (cluster is None or j["cluster"] == cluster)
                    and (state is None or j["jobState"] == state)]

    def node_states(self, cluster: str) -> list[dict[str, Any]] | None:
        """The latest node list posted for the cluster, or None."""
        with self._lock:
            entry = self._nodestates.get(cluster)
            return copy.deepcopy(entry["nodes"]) if entry else None

    # -- request handling (called from handler threads) -------------------------------------------

    def _hold(self, arrival: float) -> None:
        with self._cond:
            while self._hang is not None and not self._stopping:
                remaining = arrival + self._hang - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)

    def _record(self, entry: LoggedRequest) -> None:
        if self.keep_log:
            with self._lock:
                self._log.append(entry)

    def _authorized(self, headers: Any) -> bool:
        token = headers.get("X-Auth-Token")
        if not token:
            auth = headers.get("Authorization") or ""
            token = auth[7:] if auth.startswith("Bearer ") else ""
        return token == self.token

    def _route(self, method: str, path: str, query: str, body: Any, parse_error: str | None
               ) -> tuple[int, Any]:
        """(status, payload): payload a JSON-able object, or None for an empty body."""
        if path in (START_PATH, STOP_PATH, NODESTATE_PATH):
            if method not in ("POST", "PUT"):
                return _error(405, f"method {method} not allowed")
            try:
                if path == START_PATH:
                    return self._start_job(decode_body(body, parse_error, JOB))
                if path == STOP_PATH:
                    return self._stop_job(decode_body(body, parse_error, STOP_REQUEST))
                return self._nodestate(decode_body(body, parse_error, NODESTATE_REQUEST))
            except BadRequest as e:
                return _error(400, str(e))
        if path == EDIT_META_PATH:
            if method != "PATCH":
                return _error(405, f"method {method} not allowed")
            try:
                return self._edit_meta(decode_body(body, parse_error, JOB_META_REQUEST))
            except BadRequest as e:
                return _error(400, str(e))
        if path == JOBS_PATH:
            if method != "GET":
                return _error(405, f"method {method} not allowed")
            return self._get_jobs(query)
        return _error(404, f"no route for {method} {path}")

    def _start_job(self, body: dict[str, Any]) -> tuple[int, Any]:
        job = dict(body)  # the logged body stays as it was sent
        if "jobId" not in job:
            raise BadRequest("the field 'jobId' is required")
        if job.get("startTime", 0) <= 0:
            raise BadRequest("the field 'startTime' is required and must be > 0")
        shared = job.setdefault("shared", "none")
        if shared not in SHARED_VALUES:
            raise BadRequest(f"invalid value for 'shared': {shared!r}")
        state = job.get("jobState", "running")
        if state not in VALID_STATES and state != "out-of-memory":
            raise BadRequest(f"not a valid job state: {state}")
        # importer.SanityChecks
        cluster = job.get("cluster", "")
        if cluster not in self._hosts:
            raise BadRequest(f"no such cluster: {cluster}")
        resources = job.get("resources") or []
        if not resources or not job.get("user"):
            raise BadRequest("'resources' and 'user' should not be empty")
        hosts = self._hosts[cluster]
        if hosts is not None and "subCluster" not in job and \
                resources[0].get("hostname") not in hosts:
            raise BadRequest(f"no subcluster found for cluster {cluster} and host "
                             f"{resources[0].get('hostname')}")
        num_nodes = job.get("numNodes", 0)
        if job.get("numAcc", 0) < 0 or job.get("numHwthreads", 0) < 0 or num_nodes < 1:
            raise BadRequest("'numNodes', 'numAcc' or 'numHWThreads' invalid")
        if len(resources) != num_nodes:
            raise BadRequest(f"len(resources) does not equal numNodes "
                             f"({len(resources)} vs {num_nodes})")
        for i, res in enumerate(resources):
            if not res.get("hostname"):
                raise BadRequest(f"resources[{i}].hostname must not be empty")
        job["jobState"] = "running"
        job.setdefault("monitoringStatus", 1)
        job_id, start = job["jobId"], job["startTime"]
        with self._lock:
            key = (cluster, job_id)
            for dbid in self._by_key.get(key, ()):
                old = self._jobs[dbid]
                if start - old["startTime"] < SECONDS_PER_DAY:
                    return _error(422, "a job with that jobId, cluster and startTime already "
                                       f"exists: dbid: {dbid}, jobid: {job_id}")
            dbid = self._next_id
            self._next_id += 1
            job["id"] = dbid
            job["duration"] = 0
            self._jobs[dbid] = job
            self._by_key.setdefault(key, []).append(dbid)
            self._by_jobid.setdefault(job_id, []).append(dbid)
        return 201, {"msg": "success"}

    def _find(self, job_id: int, cluster: str | None, start: int | None
              ) -> dict[str, Any] | None:
        """cc-backend's ``Find``: the newest job (by database id) with that jobId, filtered
        by cluster and startTime when given. Call with the lock held."""
        ids = (self._by_jobid.get(job_id, ()) if cluster is None
               else self._by_key.get((cluster, job_id), ()))
        for dbid in reversed(ids):  # newest first
            cand = self._jobs[dbid]
            if start is None or cand["startTime"] == start:
                return cand
        return None

    def _stop_job(self, req: dict[str, Any]) -> tuple[int, Any]:
        for field in ("jobId", "stopTime", "jobState"):
            if field not in req:
                raise BadRequest(f"the field '{field}' is required")
        job_id, cluster, start = req["jobId"], req.get("cluster"), req.get("startTime")
        with self._lock:
            job = self._find(job_id, cluster, start)
            if job is None:
                return _error(404, "finding job failed: sql: no rows in result set")
            where = f"jobId {job_id} (id {job['id']}) on {job['cluster']}"
            if job["jobState"] != "running":
                return _error(422, f"{where} : job has already been stopped "
                                   f"(state is: {job['jobState']})")
            if job["startTime"] > req["stopTime"]:
                return _error(400, f"{where} : stopTime {req['stopTime']} must be larger/equal "
                                   f"than startTime {job['startTime']}")
            if req["jobState"] not in STOP_STATES:
                return _error(400, f"{where} : invalid requested job state: "
                                   f"{req['jobState']!r}")
            job["jobState"] = req["jobState"]
            job["duration"] = req["stopTime"] - job["startTime"]
            job["stopTime"] = req["stopTime"]
            job["_archivedAt"] = time.monotonic() + (self._archive_after or 0.0)
            return 200, _job_json(job, with_meta=False)

    def _edit_meta(self, req: dict[str, Any]) -> tuple[int, Any]:
        if "jobId" not in req:
            raise BadRequest("the field 'jobId' is required")
        payload = req.get("payload", {})
        key, value = payload.get("key", ""), payload.get("value", "")
        with self._lock:
            job = self._find(req["jobId"], req.get("cluster"), req.get("startTime"))
            if job is None:
                return _error(422, "finding job failed: sql: no rows in result set")
            job["metaData"] = {**job.get("metaData", {}), key: value}
            if job["jobState"] != "running" and time.monotonic() < job["_archivedAt"]:
                # http.Error(rw, err.Error(), 500) with os.ReadFile's error (job.go:526-529)
                return 500, (f"open ./var/job-archive/{job['cluster']}/{job['jobId'] // 1000}/"
                             f"{job['jobId'] % 1000:03d}/{job['startTime']}/meta.json: no "
                             "such file or directory\n")
            return 200, _job_json(job, with_meta=True)

    def _nodestate(self, req: dict[str, Any]) -> tuple[int, Any]:
        if not req.get("cluster"):
            raise BadRequest("the field 'cluster' is required")
        nodes = req.get("nodes") or []
        for i, node in enumerate(nodes):
            if not node.get("hostname"):
                raise BadRequest(f"nodes[{i}].hostname must not be empty")
        with self._lock:
            self._nodestates[req["cluster"]] = {"time": time.time(),
                                                "nodes": copy.deepcopy(nodes)}
        return 200, None

    def _get_jobs(self, query: str) -> tuple[int, Any]:
        states: list[str] = []
        cluster = project = None
        span: tuple[int, int] | None = None
        page, per_page, with_meta = 1, 25, False
        for key, vals in parse_qs(query, keep_blank_values=True).items():
            if key == "state":
                for s in vals:
                    if s not in VALID_STATES:
                        return _error(400, "invalid query parameter value: state")
                    states.append(s)
            elif key == "cluster":
                cluster = vals[0]
            elif key == "project":
                project = vals[0]
            elif key == "start-time":
                parts = vals[0].split("-")
                if len(parts) != 2 or not all(_INT_RE.fullmatch(p) for p in parts):
                    return _error(400, "invalid query parameter value: startTime")
                span = (int(parts[0]), int(parts[1]))
            elif key in ("page", "items-per-page"):
                if not _INT_RE.fullmatch(vals[0]):
                    return _error(400, f'strconv.Atoi: parsing "{vals[0]}": invalid syntax')
                if key == "page":
                    page = int(vals[0])
                else:
                    per_page = int(vals[0])
            elif key == "with-metadata":
                with_meta = True
            else:
                return _error(400, f"invalid query parameter: {key}")
        now = int(time.time())
        with self._lock:
            found = [j for j in self._jobs.values()
                     if (not states or j["jobState"] in states)
                     and (cluster is None or j["cluster"] == cluster)
                     and (project is None or j.get("project", "") == project)
                     and (span is None or span[0] <= j["startTime"] <= span[1])]
            found.sort(key=lambda j: (j["startTime"], j["id"]), reverse=True)
            if per_page >= 0:  # negative (-1): everything, as cc-backend
                found = (found[(page - 1) * per_page: page * per_page]
                         if page >= 1 and per_page else [])
            out = [_job_json(j, with_meta=with_meta, now=now) for j in found]
        return 200, {"jobs": out, "items": per_page, "page": page}


_INT_RE = re.compile(r"[+-]?[0-9]+")  # strconv.Atoi, used with fullmatch


def _error(status: int, message: str) -> tuple[int, dict[str, str]]:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    return status, {"status": reason, "error": message}


def _job_json(job: dict[str, Any], *, with_meta: bool, now: int | None = None
              ) -> dict[str, Any]:
    """A stored job as cc-backend's schema.Job marshals it (field order, omitempty)."""
    out: dict[str, Any] = {
        "cluster": job.get("cluster", ""),
        "subCluster": job.get("subCluster", ""),
    }
    if job.get("partition"):
        out["partition"] = job["partition"]
    out["project"] = job.get("project", "")
    out["user"] = job.get("user", "")
    out["shared"] = job.get("shared", "none")
    out["jobState"] = job["jobState"]
    if job.get("tags"):
        out["tags"] = copy.deepcopy(job["tags"])
    out["resources"] = [_resource_json(r) for r in job.get("resources", ())]
    out["energyFootprint"] = dict(job["energyFootprint"]) if "energyFootprint" in job else None
    out["footprint"] = dict(job["footprint"]) if "footprint" in job else None
    out["metaData"] = dict(job["metaData"]) if with_meta and "metaData" in job else None
    out["concurrentJobs"] = {"items": None, "count": 0}
    out["energy"] = job.get("energy", 0)
    for key in ("arrayJobId", "walltime", "requestedMemory"):
        if job.get(key):
            out[key] = job[key]
    out["jobId"] = job["jobId"]
    if job["jobState"] == "running":
        out["duration"] = (now if now is not None else int(time.time())) - job["startTime"]
    else:
        out["duration"] = job["duration"]
    for key in ("smt", "monitoringStatus", "numAcc", "numHwthreads"):
        if job.get(key):
            out[key] = job[key]
    out["numNodes"] = job["numNodes"]
    out["statistics"] = copy.deepcopy(job.get("statistics", {}))
    out["id"] = job["id"]
    if job.get("submitTime"):
        out["submitTime"] = job["submitTime"]
    out["startTime"] = job["startTime"]
    return out


def _resource_json(res: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"hostname": res["hostname"]}
    if res.get("configuration"):
        out["configuration"] = res["configuration"]
    if res.get("hwthreads"):
        out["hwthreads"] = list(res["hwthreads"])
    if res.get("accelerators"):
        out["accelerators"] = list(res["accelerators"])
    return out


# ---------------------------------------------------------------------------------------------
# HTTP plumbing.


class _Server(ThreadingHTTPServer):
    """One daemon thread per connection (ThreadingMixIn ignores daemon threads on close, so
    they are tracked here: ``stop()`` ends every connection and joins its thread)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 standin: CcBackendStandin, family: socket.AddressFamily) -> None:
        self.address_family = family
        self.standin = standin
        self._conns: set[socket.socket] = set()
        self._workers: set[threading.Thread] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would ask the resolver for the FQDN; not needed here.
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        worker = threading.Thread(target=self._serve_connection,
                                  args=(request, client_address), daemon=True,
                                  name=f"ccbackend-standin-conn:{self.server_address[1]}")
        with self._conns_lock:
            self._conns.add(request)
            self._workers.add(worker)
        worker.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._conns_lock:
                self._workers.discard(threading.current_thread())

    def join_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._conns_lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.standin.verbose:
            super().handle_error(request, client_address)


_MAX_LINE = 65536
_MAX_HEADERS = 100
_DATE_CACHE: list[Any] = [0, ""]


class _Headers(dict[str, str]):
    """Request headers, names lower-cased; ``get`` ignores case like email.message does."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, key.lower(), default)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cc-backend-standin/1.5"
    sys_version = ""
    disable_nagle_algorithm = True
    server: _Server

    def parse_request(self) -> bool:
        """BaseHTTPRequestHandler.parse_request without the email package (a third of the
        time of a request): request line, headers into a case-insensitive dict."""
        self.command = None
        self.request_version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request line {requestline!r}")
            return False
        self.command, self.path, version = words
        self.request_version = version
        headers = _Headers()
        readline = self.rfile.readline
        for _ in range(_MAX_HEADERS + 1):
            line = readline(_MAX_LINE + 1)
            if len(line) > _MAX_LINE:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, sep, value = line.decode("iso-8859-1").partition(":")
            if not sep or not name.strip():
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad header line {line!r}")
                return False
            headers[name.strip().lower()] = value.strip()
        else:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
            return False
        self.headers = headers  # type: ignore[assignment]
        conntype = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self.close_connection = "keep-alive" not in conntype
        else:
            self.close_connection = "close" in conntype
            if headers.get("expect", "").lower() == "100-continue":
                return self.handle_expect_100()
        return True

    def date_time_string(self, timestamp: float | None = None) -> str:
        if timestamp is not None:
            return super().date_time_string(timestamp)
        now = int(time.time())
        cached = _DATE_CACHE
        if cached[0] != now:
            cached[1] = super().date_time_string(now)
            cached[0] = now
        return cached[1]

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.standin.verbose:
            super().log_message(format, *args)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        n = int(length)
        if n < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(n)

    def _dispatch(self) -> None:
        st = self.server.standin
        arrival = time.monotonic()
        method = self.command
        target = urlsplit(self.path)
        path = target.path
        try:
            raw = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            self._send(*_error(400, "unreadable request body"))
            return
        wall = time.time()
        parse_error = None
        try:
            body = parse_json(raw)
        except ValueError as e:  # also UnicodeDecodeError
            body, parse_error = None, str(e)

        if st._hang is not None:
            st._hold(arrival)
        if st._latency:
            time.sleep(st._latency)
        if st._drop:
            st._record(LoggedRequest(wall, method, path, 0, body))
            self._trace(method, path, 0, arrival)
            self.close_connection = True
            return
        fail = st._fail
        if fail is not None:
            status, payload = _error(fail, f"stand-in answers {fail}")
        elif not st._authorized(self.headers):
            status, payload = _error(401, "missing or invalid X-Auth-Token")
        else:
            status, payload = st._route(method, path, target.query, body, parse_error)
        st._record(LoggedRequest(wall, method, path, status, body))
        self._trace(method, path, status, arrival)
        self._send(status, payload)

    def _send(self, status: int, payload: Any) -> None:
        """``payload``: JSON-able, None (empty body) or a str (text, as Go's http.Error)."""
        if isinstance(payload, str):
            body, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            body, ctype = b"" if payload is None else json.dumps(payload).encode() + b"\n", _JSON
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        head = [f"HTTP/1.1 {status} {reason}",
                f"Server: {self.server_version}",
                f"Date: {self.date_time_string()}",
                f"Content-Length: {len(body)}"]
        if payload is not None:
            head.append(f"Content-Type: {ctype}")
        if self.close_connection:
            head.append("Connection: close")
        try:
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        except OSError:  # the client went away (timed out): nothing to answer
            self.close_connection = True

    def _trace(self, method: str, path: str, status: int, arrival: float) -> None:
        if self.server.standin.verbose:
            ms = (time.monotonic() - arrival) * 1000
            sys.stderr.write(f"{self.address_string()} {method} {path} "
                             f"{status or 'dropped'} {ms:.1f}ms\n")


# ---------------------------------------------------------------------------------------------
# Standalone.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.standin.ccbackend",
                                     description="cc-backend 1.5 REST stand-in")
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1 (default) or ::1")
    parser.add_argument("--port", type=int, default=8080, help="0: any free port")
    parser.add_argument("--token", default="test-token")
    parser.add_argument("--cluster", action="append", dest="clusters", metavar="NAME",
                        help="a known cluster (repeatable; default cluster22/24/26)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--quiet", action="store_true", help="no request log on stderr")
    args = parser.parse_args(argv)

    standin = CcBackendStandin(
        token=args.token,
        clusters=args.clusters or ("cluster22", "cluster24", "cluster26"),
        host=args.host, port=args.port, verbose=not args.quiet, keep_log=False)
    standin.latency(args.latency)
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    standin.start()
    print(f"listening on {standin.url}", flush=True)
    try:
        while not done.wait(0.2):
            pass
    finally:
        standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
