"""A stand-in for ClusterCockpit's cc-backend 1.5 REST API, answering as the real server.

It follows cc-backend **v1.5.4** (tag v1.5.4, commit c94f5918) and cc-lib v2.12.0; the code
cites the file and lines (or function) of each behaviour (``api/job.go:736`` is
``internal/api/job.go`` line 736 at v1.5.4). tests/integration/test_standin_conformance.py
sends the same requests to it and to the real server and holds the two to the same answers
and the same jobs and node states afterwards; its table of known differences holds the
answers that differ on purpose. What is not modelled at all is listed further down.

Bodies are decoded as cc-backend's ``decode()`` does (Go's encoding/json with
``DisallowUnknownFields``): an unknown field (also inside ``resources[]``, ``tags[]``,
``statistics``, ...) or a value of the wrong JSON type (an integer must be an integer: no
bool, float or string; int32 fields in int32 range) is ``400``; but keys match
case-insensitively, a JSON ``null`` leaves a field at its default (a top-level ``null``
decodes to the defaults), data after the first JSON value is ignored, and invalid UTF-8 is
replaced. Served, on 127.0.0.1 or ::1, are the five endpoints ccadapter uses:

``POST|PUT /api/jobs/start_job/``
    ``schema.Job``; ``statistics`` is ``map[string]JobStatistics``. Then
    ``importer.SanityChecks``: known cluster; the subcluster assignment (a given
    ``subCluster`` must be one of the cluster's, else the first resource's host must be in a
    subcluster's node list; no resources: ``job without any resources/hosts``); non-empty
    ``user`` and ``resources``, ``numNodes >= 1``, ``numHwthreads >= 0``, ``numAcc >= 0``,
    ``len(resources) == numNodes``. Nothing requires ``jobId`` or ``startTime`` (0 is
    stored), and ``jobState`` is overwritten with ``running``. A run with the same ``jobId``
    and ``cluster`` as one in the **job table** and ``new.startTime - old.startTime < 86400``
    is ``422`` (compared signed: an *earlier* start is always a duplicate). Then the job goes
    into the **job cache** (with ``tags``: straight into the job table); its constraints make
    a ``500``: UNIQUE (jobId, cluster, startTime) for a start sent again while its run is
    cached, the CHECKs on ``smt`` (0 or 1; the cache only), ``shared``
    (none/single_user/multi_user) and ``monitoringStatus`` (0..3). Success: ``201`` with
    ``{"msg": "success"}`` -- cc-backend 1.5 returns no database id; see ``jobs()``. Stored
    as ``running``, ``shared`` defaulting to ``none``, ``monitoringStatus`` to 1, without
    ``submitTime``, ``requestedMemory`` and ``statistics`` (cc-backend does not store them).

``POST|PUT /api/jobs/stop_job/``
    Fields ``jobId`` (required), ``cluster``, ``startTime``, ``stopTime``, ``jobState``.
    The job is the newest (by id) in the **job cache** with that ``jobId``, filtered by
    ``cluster`` and ``startTime`` when given, else the newest such in the job table
    (cc-backend's ``FindCached``, then ``Find``: without ``cluster`` any cluster matches).
    None: ``404``; not running: ``422``; then ``stopTime < startTime`` (a missing stopTime
    is 0): ``400``; a ``jobState`` that is not one of cc-lib's ``JobState.Valid()``: ``400``
    (``running``, ``pending`` and ``suspended`` are taken; empty or missing is
    ``completed``). A cached job is moved to the job table first (a run there already:
    ``500``). Note that cc-lib spells ``out_of_memory``; the swagger's ``out-of-memory`` is
    a documentation typo the real server refuses, so this stand-in refuses it as well.
    Success: ``200`` with the stopped job (``schema.Job`` JSON, ``duration`` set).

``POST|PUT /api/nodestate/``
    ``{"cluster": str, "nodes": [schema.NodePayload]}``. Each node's latest state is kept
    as cc-backend stores it: one scheduler state derived from ``states`` (determineState),
    a health state, the counts, the time received (``node_states()``). A node left out of a
    later post keeps its state, ``nodes: []`` changes nothing; a node outside the cluster's
    node lists, of an unknown cluster, or with an empty name is dropped. Always ``200``
    with an *empty* body, as cc-backend 1.5 writes none; only a body that does not decode
    is ``400``.

``PATCH /api/jobs/edit_meta/`` (cc-backend v1.5.4 internal/api/job.go:503-534)
    ``JobMetaRequest`` (job.go:70-81): ``jobId`` (required), ``cluster``, ``startTime``,
    ``payload: {"key", "value"}``. The job is found as stop_job finds it, in the job table
    only (a run still in the job cache, or none: ``422`` ``finding job failed``), and
    ``metaData[key] = value`` is stored. Success: ``200`` with the job (``schema.Job``
    JSON, ``metaData`` included). cc-backend then updates the job archive of a stopped job,
    and answers ``500`` with a plain-text error when its ``meta.json`` is not written yet
    -- after having stored the value (repository/job.go:301-310,
    pkg/archive/archive.go:374-390, fsBackend.go:77-82); for good with ``monitoringStatus``
    0 (never archived); and ``500`` with an empty body (a recovered panic) when the job had
    no metaData when it was archived. ``archive_after(seconds)`` models the archiver taking
    that long after a stop (default ``None``: archived at once).

``DELETE /api/jobs/delete_job/`` (cc-backend v1.5.4 internal/api/job.go:905-940)
    ``DeleteJobAPIRequest``: ``jobId`` (required), ``cluster``, ``startTime``. The newest
    matching run of the job table (not the cache) is deleted: ``200``
    ``{"msg": "Successfully deleted job <id>"}``; none: ``422`` ``finding job failed``.

``GET /api/jobs/?state=..&cluster=..&project=..&start-time=FROM-TO&items-per-page=N&page=P``
    The **job table** only: a start still in the job cache is not listed. Unknown query
    parameters, invalid states, ``items-per-page`` or ``page`` below 1 (``-1`` too) are
    ``400``. Jobs sorted by descending ``startTime`` (ties: descending id), ``items-per-page``
    default 25, ``page`` default 1. Answer ``{"jobs": [...], "items": N, "page": P}`` where
    ``items`` is, as in cc-backend, the *requested page size*, not the number of jobs
    returned: a client pages until a page has fewer than N jobs. ``metaData`` is only filled
    with ``with-metadata``; ``energyFootprint`` is null, ``statistics`` null until the job
    is archived (then ``{}``), ``submitTime`` absent, as cc-backend reads them back.

The job cache. cc-backend 1.5 inserts a start into ``job_cache``; a commit worker moves the
cached rows into ``job`` every ``commit-job-worker`` (default 2 min; the sample config says
1 min). ``commit_interval`` (``--commit-interval``) is that period here; the default 0
commits each start at once, so that tests that do not care see one table. ``cached()``
shows the cache, ``commit_now()`` runs the worker once, ``jobs()`` is the job table.

Not modelled, on purpose: the NATS API (REST start/stop
answered 404 when cc-backend takes jobs from NATS); the commit worker's minimum of one
interval (``commit_interval`` 0, the default, commits at once) and its races with stop and
start; a failed archiving (``monitoringStatus`` 2) and metric data (an archived job shows
``monitoringStatus`` 3, ``footprint`` ``{}``, ``energy`` 0, as cc-backend with an empty metric
store and no footprint or energy metrics shows it); a cluster given without nodes,
which takes any host; the health check of the metric store (a node not down is
``failed``, as with no metric data); cc-backend's other routes (``GET /api/jobs/{id}``,
``/query``, ...); JWT signatures, roles, ``api-allowed-ips``, gzip.

Every request needs ``X-Auth-Token: <token>`` (or ``Authorization: Bearer <token>``), else
``401``. Unknown paths are ``404``, a wrong method on a known path ``405``. Errors are
``{"status": "<reason>", "error": "<message>"}``.

Behaviour switches, thread-safe, settable while serving: ``fail_with(status)``,
``hang(seconds)``, ``drop_connections(on)``, ``latency(seconds)``, ``archive_after(seconds)``.
Every request is logged (``requests()``, ``count()``, ``started()``, ``stopped()``), dropped
ones with status 0.

Standalone (for benchmarks)::

    python -m tests.standin.ccbackend --port 8080 --token X --cluster c1 --cluster c2 \
        [--latency 0.005] [--commit-interval 60] [--host ::1] [--quiet]

prints ``listening on URL`` to stdout, logs requests to stderr, serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
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
# The one subcluster of every cluster the stand-in knows (cc-backend names them in its
# cluster.json; each job is assigned one).
SUBCLUSTER = "main"
# schema.Job fields that cc-backend's insert leaves out (repository/jobCreate.go:17-23).
_NOT_STORED = frozenset({"submitTime", "requestedMemory", "statistics", "concurrentJobs",
                         "id"})

START_PATH = "/api/jobs/start_job/"
STOP_PATH = "/api/jobs/stop_job/"
NODESTATE_PATH = "/api/nodestate/"
EDIT_META_PATH = "/api/jobs/edit_meta/"
DELETE_PATH = "/api/jobs/delete_job/"
JOBS_PATH = "/api/jobs/"

_JSON = "application/json"


# ---------------------------------------------------------------------------------------------
# Decoding as cc-backend's ``decode()`` does (api/rest.go: decode): Go's encoding/json with
# DisallowUnknownFields, which is strict about unknown keys and types but keeps Go's
# leniencies -- keys match case-insensitively, a JSON null leaves a field at its zero value,
# data after the first JSON value is ignored, invalid UTF-8 is replaced.


class BadRequest(Exception):
    """The body does not decode, or fails a sanity check: 400."""


class GoType:
    """A Go type as encoding/json decodes into it. ``decode(v, where)`` checks a parsed JSON
    value and returns what Go would hold (a Struct: only its fields, named as Go names them,
    nulls left out); ``zero()`` is what a null inside a list or map becomes."""

    def __init__(self, name: str, check: Callable[[Any, str], Any], zero: Any) -> None:
        self.name = name
        self._check = check
        self._zero = zero  # immutable: 0, "" or None (a nil slice or map)

    def decode(self, v: Any, where: str) -> Any:
        return self._check(v, where)

    def zero(self) -> Any:
        return self._zero


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
    shown = f"number {v}" if _json_type(v) == "number" else _json_type(v)
    return BadRequest(f"json: cannot unmarshal {shown} into Go struct field {where} "
                      f"of type {go_type}")


def _int(bits: int) -> GoType:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    go_type = f"int{bits}"

    def check(v: Any, where: str) -> int:
        if type(v) is not int or not lo <= v <= hi:
            raise _mismatch(v, where, go_type)
        return v

    return GoType(go_type, check, 0)


def _string(v: Any, where: str) -> str:
    if type(v) is not str:
        raise _mismatch(v, where, "string")
    return v


def _number(v: Any, where: str) -> float | int:
    if type(v) not in (int, float):
        raise _mismatch(v, where, "float64")
    return v


INT32 = _int(32)
INT64 = _int(64)
STRING = GoType("string", _string, "")
NUMBER = GoType("float64", _number, 0)


def _list_of(item: GoType) -> GoType:
    def check(v: Any, where: str) -> list[Any]:
        if type(v) is not list:
            raise _mismatch(v, where, f"[]{item.name}")
        return [item.zero() if x is None else item.decode(x, f"{where}[{i}]")
                for i, x in enumerate(v)]

    return GoType(f"[]{item.name}", check, None)


def _map_of(value: GoType) -> GoType:
    def check(v: Any, where: str) -> dict[str, Any]:
        if type(v) is not dict:
            raise _mismatch(v, where, f"map[string]{value.name}")
        return {k: value.zero() if x is None else value.decode(x, f"{where}[{k!r}]")
                for k, x in v.items()}

    return GoType(f"map[string]{value.name}", check, None)


class Struct(GoType):
    """A Go struct: its JSON field names and their types; any other key is an unknown
    field. Keys match case-insensitively (a key spelled exactly wins over a folded one, as
    in Go; here a later key of the same field simply overwrites, which is what Go does for
    two exact spellings)."""

    def __init__(self, name: str, fields: Mapping[str, GoType]) -> None:
        self.fields = dict(fields)
        self._folded = {k.lower(): k for k in self.fields}
        super().__init__(name, self._decode_struct, None)

    def zero(self) -> dict[str, Any]:
        return {}  # a struct with every field at its zero value, fresh each time

    def _decode_struct(self, v: Any, where: str) -> dict[str, Any]:
        if type(v) is not dict:
            raise _mismatch(v, where or self.name, self.name)
        out: dict[str, Any] = {}
        for key, x in v.items():
            name = key if key in self.fields else self._folded.get(key.lower())
            if name is None:
                raise BadRequest(f'json: unknown field "{key}"'
                                 + (f" in {where}" if where else ""))
            if x is None:  # Go leaves the field as it was: its zero value or default
                out.pop(name, None)
                continue
            out[name] = self.fields[name].decode(x, f"{where or self.name}.{name}")
        return out

    def __call__(self, v: Any, where: str = "") -> dict[str, Any]:
        return self.decode(v, where)


RESOURCE = Struct("Resource", {
    "hostname": STRING, "configuration": STRING,
    "hwthreads": _list_of(INT64), "accelerators": _list_of(STRING),
})
TAG = Struct("Tag", {"type": STRING, "name": STRING, "scope": STRING, "id": INT64})
JOB_LINK = Struct("JobLink", {"id": INT64, "jobId": INT64})
JOB_LINK_LIST = Struct("JobLinkResultList", {"items": _list_of(JOB_LINK), "count": INT64})
UNIT = Struct("Unit", {"base": STRING, "prefix": STRING})
# cc-lib v2.12.0 schema/job.go: Job.Statistics is map[string]JobStatistics, decoded as
# strictly as the rest (no lenient JobStatisticsSet: that type is not in cc-lib v2.12.0).
JOB_STATISTICS = Struct("JobStatistics", {
    "unit": UNIT, "avg": NUMBER, "min": NUMBER, "max": NUMBER,
})

# cc-lib schema.Job (cc-backend 1.5), with the Go types of its fields.
JOB = Struct("Job", {
    "cluster": STRING, "subCluster": STRING, "partition": STRING, "project": STRING,
    "user": STRING, "shared": STRING, "jobState": STRING,
    "tags": _list_of(TAG), "resources": _list_of(RESOURCE),
    "energyFootprint": _map_of(NUMBER), "footprint": _map_of(NUMBER),
    "metaData": _map_of(STRING), "concurrentJobs": JOB_LINK_LIST, "energy": NUMBER,
    "arrayJobId": INT64, "walltime": INT64, "requestedMemory": INT64, "jobId": INT64,
    "duration": INT32, "smt": INT32, "monitoringStatus": INT32, "numAcc": INT32,
    "numHwthreads": INT32, "numNodes": INT32, "statistics": _map_of(JOB_STATISTICS),
    "id": INT64, "submitTime": INT64, "startTime": INT64,
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
# cc-backend v1.5.4 internal/api/job.go:49-53
DELETE_REQUEST = Struct("DeleteJobAPIRequest", {
    "jobId": INT64, "cluster": STRING, "startTime": INT64,
})
JOB_META_REQUEST = Struct("JobMetaRequest", {
    "jobId": INT64, "cluster": STRING, "startTime": INT64, "payload": EDIT_META_REQUEST,
})


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_json(raw: bytes) -> Any:
    """The first JSON value of the body, as Go's json.Decoder reads it: invalid UTF-8
    replaced, no NaN/Infinity, anything after the value ignored; an empty body is EOF."""
    text = raw.decode("utf-8", errors="replace").lstrip(" \t\r\n")
    if not text:
        raise ValueError("EOF")
    return _DECODER.raw_decode(text)[0]


def decode_body(body: Any, parse_error: str | None, struct: Struct) -> dict[str, Any]:
    """What cc-backend's handler holds after decoding an already parsed body into
    ``struct``: a new dict (the body is not modified); a top-level null decodes to the
    struct's defaults (Go's Decode leaves the value alone)."""
    if parse_error is not None:
        raise BadRequest(f"parsing request body failed: {parse_error}")
    try:
        return struct({} if body is None else body)
    except BadRequest as e:
        raise BadRequest(f"parsing request body failed: {e}") from None


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
# cc-backend's two job tables.


class _SqlError(Exception):
    """A constraint of cc-backend's SQLite schema failed (its message as SQLite words it)."""


class _Table:
    """``job`` or ``job_cache`` as cc-backend's schema makes them (v1.5.4
    internal/repository/migrations/sqlite3/09_add-job-cache.up.sql: job_cache :1-34, job as
    job_new :36-69, renamed at :118-119): INTEGER PRIMARY KEY ids (max + 1: an emptied table
    starts at 1 again), CHECK on ``shared`` (:26-27, :61-62) and ``monitoring_status``
    (:28-29, :63-64), CHECK on ``smt`` in ``job_cache`` only (:25; ``job`` has none, :60),
    UNIQUE (job_id, cluster, start_time) (:33, :68). Not thread-safe: the stand-in's lock
    guards it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._checks_smt = name == "job_cache"
        self.rows: dict[int, dict[str, Any]] = {}  # by id, ascending
        self._by_jobid: dict[int, list[int]] = {}
        self._last = 0

    def insert(self, job: dict[str, Any]) -> int:
        """Stores ``job`` (its ``id`` set); raises _SqlError where SQLite would."""
        # SQLite tests the CHECKs in the order of the columns, then UNIQUE
        if self._checks_smt and job.get("smt", 0) not in (0, 1):
            raise _SqlError("CHECK constraint failed: smt IN (0, 1)")
        if job.get("shared") not in SHARED_VALUES:
            raise _SqlError('CHECK constraint failed: shared IN ("none", "single_user", '
                            '"multi_user")')
        if job.get("monitoringStatus", 1) not in (0, 1, 2, 3):
            raise _SqlError("CHECK constraint failed: monitoring_status IN (0, 1, 2, 3)")
        if self.find(job["jobId"], job["cluster"], job["startTime"]):
            raise _SqlError(f"UNIQUE constraint failed: {self.name}.job_id, "
                            f"{self.name}.cluster, {self.name}.start_time")
        self._last += 1
        job["id"] = self._last
        self.rows[self._last] = job
        self._by_jobid.setdefault(job["jobId"], []).append(self._last)
        return self._last

    def delete(self, rowid: int) -> None:
        job = self.rows.pop(rowid)
        ids = self._by_jobid[job["jobId"]]
        ids.remove(rowid)
        if not ids:
            del self._by_jobid[job["jobId"]]
        if rowid == self._last:
            self._last = max(self.rows, default=0)

    def clear(self) -> None:
        self.rows.clear()
        self._by_jobid.clear()
        self._last = 0

    def find(self, job_id: int, cluster: str | None = None,
             start: int | None = None) -> list[dict[str, Any]]:
        """Rows of ``job_id``, oldest first; ``cluster``/``start`` None match any."""
        out = []
        for rowid in self._by_jobid.get(job_id, ()):
            row = self.rows[rowid]
            if (cluster is None or row["cluster"] == cluster) and \
                    (start is None or row["startTime"] == start):
                out.append(row)
        return out

    def newest(self, job_id: int, cluster: str | None, start: int | None
               ) -> dict[str, Any] | None:
        """``ORDER BY id DESC LIMIT 1`` of Find/FindCached (repository/jobFind.go:45, :76)."""
        found = self.find(job_id, cluster, start)
        return found[-1] if found else None


# ---------------------------------------------------------------------------------------------
# The clusters' node lists (cc-backend reads them from each cluster.json's subClusters).

# A cluster's nodes: None (any host, in subcluster ``main``; no cluster.json does this for
# jobs and node states alike: a test's convenience), its hostnames (one subcluster,
# ``main``), or subcluster name -> hostnames in cluster.json's order.
ClusterNodes = Iterable[str] | Mapping[str, Iterable[str]] | None
# cluster -> subcluster -> its hosts, or None for any host
Subclusters = dict[str, dict[str, frozenset[str]] | None]


def _subclusters(clusters: Iterable[str] | Mapping[str, ClusterNodes]) -> Subclusters:
    if not isinstance(clusters, Mapping):
        return {name: None for name in clusters}
    out: Subclusters = {}
    for name, nodes in clusters.items():
        if nodes is None:
            out[name] = None
        elif isinstance(nodes, Mapping):
            out[name] = {sub: frozenset(hosts) for sub, hosts in nodes.items()}
        else:
            out[name] = {SUBCLUSTER: frozenset(nodes)}
    return out


def _subcluster_of_host(subs: dict[str, frozenset[str]] | None, host: str) -> str | None:
    """The subcluster whose node list holds ``host`` (pkg/archive/clusterConfig.go:
    AssignSubCluster and GetSubClusterByNode both look the host up in NodeLists)."""
    if subs is None:
        return SUBCLUSTER
    return next((sub for sub, hosts in subs.items() if host in hosts), None)


def scheduler_state(states: Iterable[str]) -> str:
    """api/node.go: determineState -- the states lower-cased, the first rule that matches
    wins; a state is not split (``IDLE+DRAIN`` is unknown)."""
    held = {s.lower() for s in states}
    for state, rule in (("allocated", {"allocated"}), ("reserved", {"reserved"}),
                        ("down", {"idle", "down"}), ("idle", {"idle"}), ("down", {"down"}),
                        ("mixed", {"mixed"})):
        if rule <= held:
            return state
    return "unknown"


# ---------------------------------------------------------------------------------------------
# The stand-in.


class CcBackendStandin:
    """An in-memory cc-backend 1.5 REST API on a ThreadingHTTPServer in a daemon thread."""

    def __init__(
        self,
        token: str = "test-token",
        clusters: Iterable[str] | Mapping[str, ClusterNodes] = (
            "cluster22", "cluster24", "cluster26"),
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        verbose: bool = False,
        keep_log: bool = True,
        commit_interval: float = 0.0,
    ) -> None:
        """``clusters``: the names cc-backend knows, or a mapping name -> its nodes as
        its cluster.json names them (:data:`ClusterNodes`): which host a job's first
        resource may name and which subcluster it gets (pkg/archive/clusterConfig.go:
        AssignSubCluster), and which nodes' states are kept (GetSubClusterByNode). A
        cluster given without nodes takes any host, in subcluster ``main``.
        ``keep_log=False`` keeps no request log (long benchmark runs).
        ``commit_interval``: seconds between two commits of the job cache (cc-backend's
        ``commit-job-worker``: 2 min by default, 1 min in its sample config); 0 commits
        each start at once (not a cc-backend setting: a test's convenience)."""
        if commit_interval < 0:
            raise ValueError("commit_interval must be >= 0")
        self.token = token
        self.commit_interval = float(commit_interval)
        self.host = host
        self.port = port
        self.verbose = verbose
        self.keep_log = keep_log
        self._subclusters = _subclusters(clusters)
        self.url = ""
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

        self._lock = threading.Lock()  # storage and log
        self._log: list[LoggedRequest] = []
        self._jobs = _Table("job")
        # the routes that take a JSON body: path -> (methods, its struct, the handler)
        self._posted: dict[str, tuple[tuple[str, ...], Struct,
                                      Callable[[dict[str, Any]], tuple[int, Any]]]] = {
            START_PATH: (("POST", "PUT"), JOB, self._start_job),
            STOP_PATH: (("POST", "PUT"), STOP_REQUEST, self._stop_job),
            NODESTATE_PATH: (("POST", "PUT"), NODESTATE_REQUEST, self._nodestate),
            EDIT_META_PATH: (("PATCH",), JOB_META_REQUEST, self._edit_meta),
            DELETE_PATH: (("DELETE",), DELETE_REQUEST, self._delete_job),
        }
        self._cache = _Table("job_cache")
        # (cluster, hostname) -> the node's latest node_state row, as cc-backend reads it
        self._nodes: dict[tuple[str, str], dict[str, Any]] = {}

        self._cond = threading.Condition()  # switches
        self._fail: int | None = None
        self._hang: float | None = None
        self._drop = False
        self._latency = 0.0
        self._archive_after: float | None = None
        self._stopping = False
        self._committer: threading.Thread | None = None
        self._commit_stop = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def clusters(self) -> list[str]:
        return list(self._subclusters)

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
        if self.commit_interval > 0:
            self._commit_stop.clear()
            self._committer = threading.Thread(target=self._commit_loop,
                                               name=f"ccbackend-standin-commit:{port}",
                                               daemon=True)
            self._committer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._commit_stop.set()
        if self._committer is not None:
            self._committer.join()
            self._committer = None
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

    def finish_archiving(self) -> None:
        """The archiver has written every pending archive now (edit_meta succeeds, unless
        the job had no metaData by then). A job stopped with ``monitoringStatus`` 0 is
        never archived."""
        now = time.monotonic()
        with self._lock:
            for job in self._jobs.rows.values():  # a stopped job is in `job`
                if now < job.get("_archivedAt", 0.0) < math.inf:
                    job["_archivedAt"] = now

    def reset(self) -> None:
        """Switches off, log, jobs and node states cleared."""
        with self._cond:
            self._fail, self._hang, self._drop, self._latency = None, None, False, 0.0
            self._archive_after = None
            self._cond.notify_all()
        with self._lock:
            self._log.clear()
            self._jobs.clear()
            self._cache.clear()
            self._nodes.clear()

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
        """The ``job`` table: jobs as cc-backend serializes them (with ``metaData``), by
        database id. Not the starts still in the job cache (:meth:`cached`); a test that
        counts jobs at its end calls :meth:`commit_now` first."""
        with self._lock:
            return [_job_json(j, with_meta=True, listing=True)
                    for j in self._jobs.rows.values()
                    if (cluster is None or j["cluster"] == cluster)
                    and (state is None or j["jobState"] == state)]

    def cached(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """The ``job_cache`` table: starts not committed yet, by cache id (a sequence of its
        own, restarting at 1 once a commit emptied the table)."""
        with self._lock:
            return [_job_json(j, with_meta=True) for j in self._cache.rows.values()
                    if cluster is None or j["cluster"] == cluster]

    def misapply_stop(self, job_id: int, start: int, state: str, duration: int) -> None:
        """What cc-backend 1.5.4's stop/commit race leaves (tests/ccbackend.py): the run of
        the job table stopped with another run's state and duration."""
        with self._lock:
            row = self._jobs.newest(job_id, None, start)
            assert row is not None, f"no run of job {job_id} starting at {start}"
            row.update(jobState=state, duration=duration)

    def commit_now(self) -> int:
        """Run the commit worker once (``SyncJobs``); returns how many rows it moved."""
        with self._lock:
            return self._sync_jobs()

    def node_states(self, cluster: str) -> dict[str, dict[str, Any]]:
        """What cc-backend holds for the cluster's nodes, in the shape of
        tests/ccbackend.py ``CcBackend.node_states``: hostname -> its latest row
        (``hostname``, ``cluster``, ``subCluster``, ``schedulerState``, ``healthState``,
        ``time_stamp``, ``cpus_allocated``, ``memory_allocated``, ``gpus_allocated``,
        ``jobs_running``). A node never posted, or dropped, is absent."""
        with self._lock:
            return {host: dict(row) for (c, host), row in self._nodes.items()
                    if c == cluster}

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
        posted = self._posted.get(path)
        if posted is not None:
            methods, struct, handle = posted
            if method not in methods:
                return _error(405, f"method {method} not allowed")
            try:
                return handle(decode_body(body, parse_error, struct))
            except BadRequest as e:
                return _error(400, str(e))
        if path == JOBS_PATH:
            if method != "GET":
                return _error(405, f"method {method} not allowed")
            return self._get_jobs(query)
        if path.startswith(JOBS_PATH) and path[len(JOBS_PATH):].isdigit() and method == "GET":
            return self._get_job(int(path[len(JOBS_PATH):]))
        return _error(404, f"no route for {method} {path}")

    def _delete_job(self, req: dict[str, Any]) -> tuple[int, Any]:
        """api/job.go:905-940 (deleteJobByRequest): the job table only (Find, the newest
        matching row), 422 when it holds none; the row goes, its archive stays."""
        if "jobId" not in req:
            raise BadRequest("the field 'jobId' is required")
        with self._lock:
            job = self._jobs.newest(req["jobId"], req.get("cluster"), req.get("startTime"))
            if job is None:
                return _error(422, "finding job failed: sql: no rows in result set")
            self._jobs.delete(job["id"])
            return 200, {"msg": f"Successfully deleted job {job['id']}"}

    def _get_job(self, db_id: int) -> tuple[int, Any]:
        """api/job.go:260-330 (getCompleteJobByID): the job table only (repository/jobFind.go
        FindByID), 422 when it holds no such id; ``Data`` empty without all-metrics."""
        with self._lock:
            job = self._jobs.rows.get(db_id)
            if job is None:
                return _error(422, f"finding job with db id {db_id} failed: sql: no rows in "
                              "result set")
            return 200, {"Meta": _job_json(job, with_meta=True, now=int(time.time()),
                                           listing=False), "Data": None}

    # cc-backend v1.5.4 is cited as FILE:LINES (FILE under internal/ unless it says pkg/).

    def _start_job(self, body: dict[str, Any]) -> tuple[int, Any]:
        """api/job.go:725-795 (startJob)."""
        # Stored as repository/jobCreate.go:17-23 inserts it: without submitTime,
        # requestedMemory, statistics, concurrentJobs, id. The logged body stays as sent.
        # Defaults set before decoding (api/job.go:726-729); the rest at Go's zero value, so
        # a start without jobId or startTime is stored with 0 (nothing requires them).
        job = {"jobId": 0, "startTime": 0, "numNodes": 0, "shared": "none",
               "monitoringStatus": 1,
               **{k: v for k, v in body.items() if k not in _NOT_STORED}}
        job["jobState"] = "running"  # api/job.go:736, whatever was sent
        self._sanity_checks(job)
        job_id, cluster, start = job["jobId"], job["cluster"], job["startTime"]
        with self._lock:
            # api/job.go:748-762: FindAll reads the job table only (repository/jobFind.go:
            # 86-124, From("job") at :96), compared signed: an earlier start is a duplicate.
            # A run still in the cache is not seen here.
            for old in self._jobs.find(job_id, cluster):
                if start - old["startTime"] < SECONDS_PER_DAY:
                    return _error(422, "a job with that jobId, cluster and startTime already "
                                       f"exists: dbid: {old['id']}, jobid: {job_id}")
            # api/job.go:764-772: with tags straight into `job` (StartDirect,
            # repository/jobCreate.go:198-215), else into `job_cache` (Start -> InsertJob,
            # :174-193, :54-70). Its constraints fail the insert: a start sent again while
            # its run is cached (UNIQUE), an `smt` other than 0/1 (job_cache only), a
            # `shared` outside the three values or a `monitoringStatus` outside 0..3 (CHECK)
            # is a 500 (api/job.go:773-776).
            table = self._jobs if job.get("tags") else self._cache
            # since when the job's metaData is not null (what its archive will hold)
            job["_metaSince"] = time.monotonic() if "metaData" in job else None
            try:
                table.insert(job)
            except _SqlError as e:
                return _error(500, f"insert into database failed: {e}")
            if self.commit_interval == 0:
                self._sync_jobs()
        return 201, {"msg": "success"}

    def _sanity_checks(self, job: dict[str, Any]) -> None:
        """importer/initDB.go:260-282 (SanityChecks), in its order, with the subcluster
        assignment of pkg/archive/clusterConfig.go (AssignSubCluster). Only the first
        resource's host is looked at: an empty hostname further on is taken."""
        cluster = job.get("cluster", "")
        if cluster not in self._subclusters:
            raise BadRequest(f"no such cluster: {cluster}")
        job["subCluster"] = self._assign_subcluster(cluster, job)
        resources = job.get("resources") or []
        if not resources or not job.get("user"):
            raise BadRequest("'resources' and 'user' should not be empty")
        num_nodes = job["numNodes"]
        if job.get("numAcc", 0) < 0 or job.get("numHwthreads", 0) < 0 or num_nodes < 1:
            raise BadRequest("'numNodes', 'numAcc' or 'numHWThreads' invalid")
        if len(resources) != num_nodes:
            raise BadRequest(f"len(resources) does not equal numNodes "
                             f"({len(resources)} vs {num_nodes})")

    def _assign_subcluster(self, cluster: str, job: dict[str, Any]) -> str:
        """pkg/archive/clusterConfig.go: AssignSubCluster -- a given subcluster must be one
        of the cluster's (its host is then not checked); else the first resource's host
        picks it."""
        subs = self._subclusters[cluster]
        given = job.get("subCluster", "")
        if given:
            if given not in (subs if subs is not None else (SUBCLUSTER,)):
                raise BadRequest(f"ARCHIVE/CLUSTERCONFIG > already assigned subcluster "
                                 f"{given} unkown (cluster: {cluster})")
            return given
        resources = job.get("resources") or []
        if not resources:
            raise BadRequest("ARCHIVE/CLUSTERCONFIG > job without any resources/hosts")
        host = resources[0].get("hostname", "")
        sub = _subcluster_of_host(subs, host)
        if sub is None:
            raise BadRequest(f"ARCHIVE/CLUSTERCONFIG > no subcluster found for cluster "
                             f"{cluster} and host {host}")
        return sub

    def _sync_jobs(self) -> int:
        """The commit worker's step, repository/jobCreate.go:72-139 (SyncJobs): every cached
        row into `job` by INSERT OR IGNORE (:103-105: a run there already, moved by its
        stop, is skipped; two cached rows of one job with other start times become two
        jobs), then the cache emptied (:111). Caller holds the lock."""
        moved = 0
        for row in list(self._cache.rows.values()):
            if not self._jobs.find(row["jobId"], row["cluster"], row["startTime"]):
                self._jobs.insert(row)
                moved += 1
        self._cache.clear()
        return moved

    def _commit_loop(self) -> None:
        """taskmanager/commitJobService.go:16-41: a gocron DurationJob running SyncJobs every
        ``commit-job-worker`` (:18-22: "2m" when unset), the first time one interval after
        the start."""
        next_at = time.monotonic() + self.commit_interval
        while not self._commit_stop.wait(max(0.0, next_at - time.monotonic())):
            self.commit_now()
            next_at += self.commit_interval

    def _stop_job(self, req: dict[str, Any]) -> tuple[int, Any]:
        """api/job.go:813-843 (stopJobByRequest) and :1001-1061 (checkAndHandleStopJob):
        only ``jobId`` is required; the lookup (404) and the already-stopped check (422)
        come before the checks of the request's own fields (400)."""
        if "jobId" not in req:
            raise BadRequest("the field 'jobId' is required")
        job_id, cluster, start = req["jobId"], req.get("cluster"), req.get("startTime")
        stop_time, state = req.get("stopTime", 0), req.get("jobState", "")
        with self._lock:
            # api/job.go:829-840: the cache first (FindCached, repository/jobFind.go:57-79),
            # then `job` (Find, :25-49); in each the newest matching row by id.
            job = self._cache.newest(job_id, cluster, start)
            cached = job is not None
            if job is None:
                job = self._jobs.newest(job_id, cluster, start)
            if job is None:
                return _error(404, "finding job failed: sql: no rows in result set")
            where = f"jobId {job_id} (id {job['id']}) on {job['cluster']}"
            if job["jobState"] != "running":  # api/job.go:1003-1006
                return _error(422, f"{where} : job has already been stopped "
                                   f"(state is: {job['jobState']})")
            if job["startTime"] > stop_time:  # api/job.go:1008-1011; a missing stopTime is 0
                return _error(400, f"{where} : stopTime {stop_time} must be larger/equal "
                                   f"than startTime {job['startTime']}")
            # api/job.go:1013-1018: empty means completed; any JobState.Valid() is taken,
            # running, pending and suspended too
            if state and state not in VALID_STATES:
                return _error(400, f"{where} : invalid requested job state: "
                                   f"{json.dumps(state)}")  # Go's %#v of a string
            if cached:
                # api/job.go:1026-1036: a cached run moves to `job` first
                # (TransferCachedJobToMain, repository/jobCreate.go:143-172), by a plain
                # INSERT: a run in `job` already is a UNIQUE violation, answered 500.
                moved = dict(job)
                try:
                    self._jobs.insert(moved)
                except _SqlError as e:
                    return _error(500, f"{where} : transferring cached job failed: "
                                       f"transferring cached job {job['id']} to main table "
                                       f"failed: {e}")
                self._cache.delete(job["id"])
                job = moved
            job["jobState"] = state or "completed"  # api/job.go:1020-1022, 1038
            job["duration"] = stop_time - job["startTime"]
            job["stopTime"] = stop_time
            answer = _job_json(job, with_meta=False, stop_answer=True)
            # api/job.go:1054-1060: archived asynchronously, never with monitoringStatus 0
            job["_archivedAt"] = (math.inf if job.get("monitoringStatus", 1) == 0
                                  else time.monotonic() + (self._archive_after or 0.0))
            return 200, answer

    def _edit_meta(self, req: dict[str, Any]) -> tuple[int, Any]:
        """api/job.go:503-534 (editMetaByRequest) and repository/job.go: UpdateMetadata:
        the value is stored, then a stopped job's archive (meta.json) updated."""
        if "jobId" not in req:
            raise BadRequest("the field 'jobId' is required")
        payload = req.get("payload", {})
        key, value = payload.get("key", ""), payload.get("value", "")
        with self._lock:
            # edit_meta finds the job with Find (repository/jobFind.go:25-49): in `job` only,
            # so a run still in the job cache is not found yet
            job = self._jobs.newest(req["jobId"], req.get("cluster"), req.get("startTime"))
            if job is None:
                return _error(422, "finding job failed: sql: no rows in result set")
            job["metaData"] = {**job.get("metaData", {}), key: value}
            if job["_metaSince"] is None:
                job["_metaSince"] = time.monotonic()
            if job["jobState"] == "running":  # pkg/archive/archive.go: UpdateMetadata no-op
                return 200, _job_json(job, with_meta=True)
            archived_at = job["_archivedAt"]
            if time.monotonic() < archived_at:  # not archived yet, or never (status 0)
                # http.Error(rw, err.Error(), 500) with os.ReadFile's error (job.go:526-529)
                return 500, (f"open var/job-archive/{job['cluster']}/{job['jobId'] // 1000}/"
                             f"{job['jobId'] % 1000:03d}/{job['startTime']}/meta.json: no "
                             "such file or directory\n")
            if job["_metaSince"] > archived_at:
                # The archiver wrote the metaData the job had then: none, so meta.json holds
                # null, and archive.UpdateMetadata's maps.Copy into that nil map panics;
                # middleware.Recoverer answers 500 with an empty body (A7 of the study).
                return 500, ""
            return 200, _job_json(job, with_meta=True)

    def _nodestate(self, req: dict[str, Any]) -> tuple[int, Any]:
        """api/node.go: updateNodeStates and repository/node.go: BatchUpdateNodeStates. Each
        post appends a row per node (only the latest row of each is kept here, which is all
        cc-backend reads back); a node left out keeps its last state, ``nodes: []`` changes
        nothing. A node outside the cluster's node lists, or of an unknown (or empty)
        cluster, is dropped with an error in cc-backend's log, and the answer is 200 with an
        empty body all the same: only decoding is ever a 400."""
        cluster = req.get("cluster", "")
        now = int(time.time())
        with self._lock:
            for node in req.get("nodes") or []:
                host = node.get("hostname", "")
                known = self._nodes.get((cluster, host))
                if known is None:
                    if cluster not in self._subclusters:
                        continue
                    sub = _subcluster_of_host(self._subclusters[cluster], host)
                    if sub is None:
                        continue
                else:  # the node row, with its subcluster, is made once
                    sub = known["subCluster"]
                self._nodes[(cluster, host)] = _node_row(cluster, sub, node, now)
        return 200, None

    def _get_jobs(self, query: str) -> tuple[int, Any]:
        """api/job.go:122-241 (getJobs)."""
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
            elif key in ("page", "items-per-page"):  # api/job.go:163-184
                if not _INT_RE.fullmatch(vals[0]):
                    return _error(400, f'strconv.Atoi: parsing "{vals[0]}": invalid syntax')
                if int(vals[0]) < 1:  # -1 ("all") too: refused before QueryJobs sees it
                    return _error(400, f"{key} must be >= 1")
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
            # repository/jobQuery.go:48: the job table only; a start still in the job cache
            # is not listed. Newest start first (api/job.go:126; the order of equal start
            # times is SQLite's, here by descending id).
            found = [j for j in self._jobs.rows.values()
                     if (not states or j["jobState"] in states)
                     and (cluster is None or j["cluster"] == cluster)
                     and (project is None or j.get("project", "") == project)
                     and (span is None or span[0] <= j["startTime"] <= span[1])]
            found.sort(key=lambda j: (j["startTime"], j["id"]), reverse=True)
            found = found[(page - 1) * per_page: page * per_page]  # jobQuery.go:78-88
            out = [_job_json(j, with_meta=with_meta, now=now, listing=True) for j in found]
        return 200, {"jobs": out, "items": per_page, "page": page}


_INT_RE = re.compile(r"[+-]?[0-9]+")  # strconv.Atoi, used with fullmatch


def _error(status: int, message: str) -> tuple[int, dict[str, str]]:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    return status, {"status": reason, "error": message}


def _archived(job: dict[str, Any]) -> bool:
    """Whether the archiver has written the job (never with monitoringStatus 0)."""
    return time.monotonic() >= job.get("_archivedAt", math.inf)


def _job_json(job: dict[str, Any], *, with_meta: bool, now: int | None = None,
              listing: bool = False, stop_answer: bool = False) -> dict[str, Any]:
    """A stored job as cc-backend reads it back and schema.Job marshals it (field order,
    omitempty): only the columns of repository/job.go:129-135 (jobColumns), so no
    submitTime, requestedMemory or energyFootprint; metaData only when asked for; the
    duration of a running job computed at reading (repository/job.go:183-186). Once
    archived (internal/archiver/archiveWorker.go: archivingWorker), monitoringStatus is 3
    and footprint and energy are recomputed from the metric data (repository/job.go:
    UpdateFootprint, UpdateEnergy) -- from the cluster's footprint and energy metrics, of
    which the stand-in's clusters have none: ``{}`` and 0; ``GET /api/jobs/`` then reads
    statistics from the archive (api/job.go:215-221), ``{}`` without metric data.
    ``stop_answer``: the job as stop_job encodes it, before archiving, duration as set."""
    archived = not stop_answer and _archived(job)
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
    out["energyFootprint"] = None  # stored, but not among the columns read (jobColumns)
    out["footprint"] = {} if archived else (
        dict(job["footprint"]) if "footprint" in job else None)
    out["metaData"] = dict(job["metaData"]) if with_meta and "metaData" in job else None
    out["concurrentJobs"] = {"items": None, "count": 0}
    out["energy"] = 0 if archived else job.get("energy", 0)
    for key in ("arrayJobId", "walltime"):
        if job.get(key):
            out[key] = job[key]
    out["jobId"] = job["jobId"]
    if job["jobState"] == "running" and not stop_answer:
        out["duration"] = (now if now is not None else int(time.time())) - job["startTime"]
    else:
        out["duration"] = job["duration"]
    shown = {**job, "monitoringStatus": 3} if archived else job
    for key in ("smt", "monitoringStatus", "numAcc", "numHwthreads"):
        if shown.get(key):
            out[key] = shown[key]
    out["numNodes"] = job["numNodes"]
    out["statistics"] = {} if archived and listing else None
    out["id"] = job["id"]
    out["startTime"] = job["startTime"]
    return out


def _node_row(cluster: str, sub: str, node: dict[str, Any], now: int) -> dict[str, Any]:
    """A node's latest state as cc-backend holds it: its scheduler state derived
    (api/node.go: determineState); health ``full`` for a down node, else the metric
    store's verdict, ``failed`` without metric data (updateNodeStates); the counts as
    sent; the time the post was received, in seconds."""
    state = scheduler_state(node.get("states") or ())
    return {"hostname": node.get("hostname", ""), "cluster": cluster, "subCluster": sub,
            "schedulerState": state, "healthState": "full" if state == "down" else "failed",
            "time_stamp": now, "cpus_allocated": node.get("cpusAllocated", 0),
            "memory_allocated": node.get("memoryAllocated", 0),
            "gpus_allocated": node.get("gpusAllocated", 0),
            "jobs_running": node.get("jobsRunning", 0)}


def _resource_json(res: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"hostname": res.get("hostname", "")}
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
    parser.add_argument("--commit-interval", type=float, default=0.0, metavar="SECONDS",
                        help="commit the job cache every SECONDS, as cc-backend's "
                             "commit-job-worker (its default: 120; sample config: 60); "
                             "0 (default): at once")
    parser.add_argument("--quiet", action="store_true", help="no request log on stderr")
    args = parser.parse_args(argv)

    standin = CcBackendStandin(
        token=args.token,
        clusters=args.clusters or ("cluster22", "cluster24", "cluster26"),
        host=args.host, port=args.port, verbose=not args.quiet, keep_log=False,
        commit_interval=args.commit_interval)
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
