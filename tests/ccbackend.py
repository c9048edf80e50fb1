"""The real cc-backend (ClusterCockpit v1.5.4) for the tests, behind a fault proxy.

Each server lives in a directory of its own, set up the way cc-backend's own documentation
sets up a site: ``config.json``, ``.env`` with an Ed25519 key pair, SQLite (``-migrate-db``),
a file job archive with one ``cluster.json`` per test cluster naming its nodes (a ``gpu``
subcluster for the node with GPUs, ``main`` for the others: cc-backend keeps topology per
subcluster), the internal metric store, and two users made with the binary's own
``-add-user`` and ``-jwt``: ``ccadapter`` (role ``api``, the daemon's token) and ``reader``
(``admin,api``: GraphQL's node queries need admin).

The daemon talks to :attr:`CcBackend.url`, the fault proxy (tests/faultproxy.py), which
forwards everything unless a test switches a fault on and logs what passed. What cc-backend
*holds* is read from cc-backend's own API on its own port (never from the proxy's log):
``GET /api/jobs/`` page by page with ``with-metadata``, ``GET /api/jobs/{id}``, and
GraphQL's ``nodes`` for node states. The binary is built by tests/testbed/ccbackend.

cc-backend lists a started job only once its job cache is committed (``cron.commit-job-worker``,
2 min by default, the first commit one interval after the server started). Suites that are
not about the cache keep the commit worker from running (:data:`NO_COMMIT`) and read the
starts it holds in the cache from its ``job_cache`` table, because cc-backend 1.5.4 stops
the wrong job when a stop meets a commit: ``stopJobByRequest`` looks the job up in the cache
before it takes ``JobRepository.Mutex`` (internal/api/job.go), the commit worker moves the
cache meanwhile, ``TransferCachedJobToMain`` then inserts nothing and takes the connection's
stale ``LastInsertId`` as the job's id (internal/repository/jobCreate.go), and the stop is
applied to that row: one job is stopped with another's state and duration, its archive is
written under the other's path, and ``GET /api/jobs/`` answers 500 from then on. Seen in
three of eight suites with a 2 s worker. The job-cache suite runs cc-backend's default.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.ccbackend_site import PLOTTED, Nodes, nodes_of, token_in, write_archive, write_env
from tests.conftest import unavailable
from tests.faultproxy import Exchange, FaultProxy
from tests.natsserver import free_port
from tests.standin.ccbackend import scheduler_state as standin_scheduler_state

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "tests" / "testbed" / "ccbackend"
RECEIVER = "cc-backend 1.5.4"
START, STOP = "/api/jobs/start_job/", "/api/jobs/stop_job/"
NODESTATE, EDIT_META = "/api/nodestate/", "/api/jobs/edit_meta/"
PAGE = 1000  # jobs per GET /api/jobs/ page (cc-backend has no maximum)
NO_COMMIT = "24h"  # a commit-worker interval no test lasts: no commit meets a stop


def binary() -> str:
    """The built cc-backend, or the test bed's verdict (a failure under tests/run)."""
    out = subprocess.run([str(BUILD), "path"], capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL, check=False)
    if out.returncode != 0:
        unavailable("cc-backend is not built: run tests/testbed/ccbackend build")
    return out.stdout.strip()


class CcBackend:
    """One cc-backend server in ``directory`` (made if missing), on 127.0.0.1, with the fault
    proxy in front. ``commit_interval``: cc-backend's ``cron.commit-job-worker`` (a Go
    duration; None leaves it to cc-backend's default, ``2m``; :data:`NO_COMMIT`: the worker
    does not run and the reads include the job cache, see the module's docstring).
    ``nats``: ``{"address", "username", "password"}`` of a running nats-server (cc-backend
    connects once, at its start: the broker must be up first); ``api_subjects`` (job
    subject, node-state subject): cc-backend takes job events and node states from those
    NATS subjects (core NATS: what is published before it subscribed is lost) and answers
    REST start/stop with 404; one worker per kind,
    so a job's stop never overtakes its start (its default of 8 would let it)."""

    def __init__(self, directory: Path, clusters: Mapping[str, Nodes] | Iterable[Any], *,
                 commit_interval: str | None = NO_COMMIT, nats: Mapping[str, str] | None = None,
                 api_subjects: tuple[str, str] | None = None) -> None:
        if isinstance(clusters, Mapping):
            self.clusters: dict[str, Nodes] = dict(clusters)
        else:
            self.clusters = {c.name: nodes_of(c) for c in clusters}
        if api_subjects and not nats:
            raise ValueError("api_subjects needs a nats server")
        self.directory = Path(directory)
        self.commit_interval = commit_interval
        self.nats = dict(nats) if nats else None
        self.api_subjects = api_subjects
        self.port = 0
        self.token = ""  # the api user's JWT: the daemon's ccRestJwt
        self.reader_token = ""  # admin+api: the test's reads (GraphQL needs admin)
        self._binary = ""
        self._proc: subprocess.Popen | None = None
        self.loglevel = "info"  # "debug" says when the commit worker syncs its job cache
        self._proxy: FaultProxy | None = None
        self._proxy_up = False

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Where the daemon sends: the fault proxy."""
        assert self._proxy is not None, "not started"
        return self._proxy.url

    @property
    def server_url(self) -> str:
        """cc-backend itself (the test's reads)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def prepare(self) -> CcBackend:
        """The directory set up (config, keys, database, archive, users and their tokens) and
        the proxy listening, cc-backend not started: :attr:`url` and :attr:`token` are
        known before it runs (a test that must start it later, e.g. after NATS)."""
        self._binary = self._binary or binary()
        if not (self.directory / "tokens.json").exists():
            self._prepare()
        saved = json.loads((self.directory / "tokens.json").read_text())
        self.port, self.token, self.reader_token = saved["port"], saved["token"], saved["reader"]
        if self._proxy is None or not self._proxy_up:
            self._proxy = FaultProxy(self.server_url).start()
            self._proxy_up = True
        return self

    def start(self) -> CcBackend:
        self.prepare()
        self._serve()
        return self

    def stop(self) -> None:
        """Proxy and server stopped; the proxy's log stays readable."""
        if self._proxy is not None and self._proxy_up:
            self._proxy.stop()
            self._proxy_up = False
        self.stop_server()

    def stop_server(self) -> None:
        """Stop cc-backend alone (SIGTERM: it writes its metric-store checkpoint and exits);
        the proxy stays, and a request through it meanwhile finds the connection refused
        and is answered by a dropped connection (status 0 in the log)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def restart_server(self) -> None:
        """cc-backend restarted in place (same database, archive and port)."""
        self.stop_server()
        self._serve()

    def rotate_keys(self) -> str:
        """A new JWT key pair, as a site rotates it: cc-backend restarted with it, so every
        token signed by the old key is refused from then on; returns the daemon's new
        token (the reader's is renewed too)."""
        self.stop_server()
        env = (self.directory / ".env").read_text()
        session = next(ln for ln in env.splitlines() if ln.startswith("SESSION_KEY"))
        write_env(self.directory, session.split("=", 1)[1].strip('"'))
        self.token, self.reader_token = self._jwt("ccadapter"), self._jwt("reader")
        (self.directory / "tokens.json").write_text(json.dumps(
            {"port": self.port, "token": self.token, "reader": self.reader_token}))
        self._serve()
        return self.token

    def kill_inside_commit(self, interval: str = "3s", timeout: float = 60) -> dict[str, Any]:
        """SIGKILL cc-backend the moment its commit worker starts to sync the job cache (a
        site's server dying inside a commit), then start it again as it was. The server runs
        meanwhile with its worker every ``interval`` and debug logging, which says when a
        sync starts ("jobcache sync started"). Returns what was seen."""
        kept = self.commit_interval, self.loglevel
        self.stop_server()
        self.commit_interval, self.loglevel = interval, "debug"
        self._write_config()
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._serve()
        cached = self.cached()
        seen = False
        until = time.time() + timeout
        with self.log_path.open("rb") as log:
            log.seek(start)
            while time.time() < until and not seen:
                chunk = log.read()
                seen = b"jobcache sync started" in chunk
                if not seen:
                    time.sleep(0.001)
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait(30)
        self._proc = None
        left = self.cached()
        self.commit_interval, self.loglevel = kept
        self._write_config()
        self._serve()
        return {"sync_seen": seen, "cached_before": cached, "cached_after_kill": left}

    def _jwt(self, name: str) -> str:
        return token_in(self._cli("-jwt", name), name)

    def __enter__(self) -> CcBackend:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        var = self.directory / "var"
        write_archive(var / "job-archive", self.clusters)
        write_env(self.directory)
        self.port = free_port()
        self._write_config()
        self._cli("-migrate-db")
        token, reader = self._user("ccadapter", "api"), self._user("reader", "admin,api")
        (self.directory / "tokens.json").write_text(json.dumps(
            {"port": self.port, "token": token, "reader": reader}))

    def _write_config(self) -> None:
        main: dict[str, Any] = {"addr": f"127.0.0.1:{self.port}", "db": "./var/job.db",
                                "api-allowed-ips": ["*"]}
        if self.api_subjects:
            job, node = self.api_subjects
            main["api-subjects"] = {"subject-job-event": job, "subject-node-state": node,
                                    "job-concurrency": 1, "node-concurrency": 1}
        config: dict[str, Any] = {
            "main": main,
            "auth": {"jwts": {"max-age": "2000h"}},
            "cron": ({"commit-job-worker": self.commit_interval}
                     if self.commit_interval else {}),
            "archive": {"kind": "file", "path": "./var/job-archive"},
            "metric-store": {"retention-in-memory": "1h", "memory-cap": 1},
            # a job page plots these (cc-backend's defaults name metrics the test bed has not)
            "ui": {"metric-config": {"job-list-metrics": list(PLOTTED),
                                     "job-view-plot-metrics": list(PLOTTED),
                                     "job-view-table-metrics": list(PLOTTED)}},
        }
        if self.nats:
            config["nats"] = self.nats
        (self.directory / "config.json").write_text(json.dumps(config, indent=1))

    def _cli(self, *args: str) -> str:
        out = subprocess.run([self._binary, *args], cwd=self.directory, capture_output=True,
                             text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"cc-backend {' '.join(args)}: rc={out.returncode} "
                               f"{(out.stdout + out.stderr)[-2000:]}")
        return out.stdout + out.stderr

    def login(self) -> tuple[str, str]:
        """The reader's user name and password: a browser's login to the web interface."""
        return "reader", (self.directory / "reader.password").read_text()

    def _user(self, name: str, roles: str) -> str:
        """The user made and its JWT printed by the binary (``-add-user``, ``-jwt``); the
        password of ``reader`` kept for :meth:`login`."""
        password = base64.b32encode(os.urandom(10)).decode()
        if name == "reader":
            fd = os.open(self.directory / "reader.password", os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(password)
        return token_in(self._cli("-add-user", f"{name}:{roles}:{password}", "-jwt", name), name)

    def _serve(self) -> None:
        """cc-backend started and answering this server's own reader token. A port picked
        free can be taken before cc-backend binds it (another test's server picked it too, or
        a connection's ephemeral port): the server then exits, and a read through the port
        reaches the other server, which refuses this one's tokens (401, "token signature is
        invalid", once seen with 16 servers started at once). A new port then, up to 3."""
        for _ in range(3):
            start = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("a") as log:
                self._proc = subprocess.Popen(
                    [self._binary, "-server", "-loglevel", self.loglevel], cwd=self.directory,
                    stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            if self._answers():
                return
            with self.log_path.open("rb") as log:
                log.seek(start)
                taken = b"address already in use" in log.read()
            self.stop_server()
            if not taken:
                break
            self._move_to(free_port())
        raise RuntimeError(f"cc-backend did not start: {self.log_path.read_text()[-3000:]}")

    def _answers(self, timeout: float = 30) -> bool:
        """Whether the server started answers its reader within ``timeout`` (False once it
        exited: e.g. its port was taken)."""
        assert self._proc is not None
        until = time.time() + timeout
        while self._proc.poll() is None and time.time() < until:
            try:
                self._get("/api/jobs/?items-per-page=1")
                return self._proc.poll() is None
            except (OSError, CcBackendError):  # not listening yet, or another server's port
                time.sleep(0.1)
        return False

    def _move_to(self, port: int) -> None:
        """This server on another port: its config, its saved tokens and the proxy's target."""
        self.port = port
        self._write_config()
        saved = json.loads((self.directory / "tokens.json").read_text())
        (self.directory / "tokens.json").write_text(json.dumps({**saved, "port": port}))
        if self._proxy is not None:
            self._proxy.upstream = urlsplit(self.server_url)

    # -- the fault proxy ---------------------------------------------------------------------

    def fail_with(self, status: int | None) -> None:
        assert self._proxy is not None
        self._proxy.fail_with(status)

    def fail_path(self, path: str, status: int | None, body: dict[str, Any] | None = None,
                  when: Callable[[Any], bool] | None = None) -> None:
        assert self._proxy is not None
        self._proxy.fail_path(path, status, body, when)

    def hang(self, seconds: float | None) -> None:
        assert self._proxy is not None
        self._proxy.hang(seconds)

    def drop_connections(self, on: bool) -> None:
        assert self._proxy is not None
        self._proxy.drop_connections(on)

    def latency(self, seconds: float) -> None:
        assert self._proxy is not None
        self._proxy.latency(seconds)

    def requests(self, path: str | None = None) -> list[Exchange]:
        """What the daemon sent through the proxy, and cc-backend's answer."""
        assert self._proxy is not None
        return self._proxy.requests(path)

    def count(self, path: str | None = None, status: int | None = None) -> int:
        assert self._proxy is not None
        return self._proxy.count(path, status)

    # -- what cc-backend holds (its own API) ---------------------------------------------------

    def _get(self, path: str, token: str | None = None) -> Any:
        req = urllib.request.Request(self.server_url + path, headers={
            "X-Auth-Token": token or self.reader_token, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise CcBackendError(exc.code, exc.read().decode("utf-8", "replace")) from None

    def jobs(self, cluster: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """Every job cc-backend lists (``GET /api/jobs/``, page by page, with metaData):
        the ``job`` table; with :data:`NO_COMMIT` also the starts in its job cache, which
        no API lists (they would be listed at a commit)."""
        if self.commit_interval != NO_COMMIT:
            return self._listed(cluster, state)
        # A stop moves its job from the cache to the job table: the cache is read first, so a
        # job that moves meanwhile is listed (and counted once), never missed by both reads.
        cached = [job for job in self._cached_jobs()
                  if cluster in (None, job["cluster"]) and state in (None, job["jobState"])]
        listed = self._listed(cluster, state)
        seen = {(j["cluster"], j["jobId"], j["startTime"]) for j in listed}
        return listed + [j for j in cached
                         if (j["cluster"], j["jobId"], j["startTime"]) not in seen]

    def _listed(self, cluster: str | None, state: str | None) -> list[dict[str, Any]]:
        query = "with-metadata=true" + (f"&cluster={cluster}" if cluster else "") + (
            f"&state={state}" if state else "")
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            doc = self._get(f"/api/jobs/?{query}&items-per-page={PAGE}&page={page}")
            got = doc.get("jobs") or []
            out += got
            if len(got) < PAGE:
                return out
            page += 1

    def job(self, db_id: int) -> dict[str, Any]:
        """One job's own record (``GET /api/jobs/{id}``: its ``Meta``)."""
        return self._get(f"/api/jobs/{db_id}")["Meta"]

    def started(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """Every run cc-backend holds, as the start_job body that made it (the fields a
        start sets, with metaData): what tests/integration/expect.py compares with Slurm."""
        return [_as_start(j) for j in self.jobs(cluster)]

    def stopped(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """Every run cc-backend holds as stopped, as the stop_job body that stopped it
        (``stopTime`` is cc-backend's startTime + duration)."""
        return [_as_stop(j) for j in self.jobs(cluster) if j["jobState"] != "running"]

    def node_states(self, cluster: str) -> dict[str, dict[str, Any]]:
        """Each node's latest state as cc-backend serves it (GraphQL ``nodes``: hostname ->
        subCluster, schedulerState, healthState), and the numbers of that row, which the
        query does not select, from its SQLite database (the server runs it in WAL mode)."""
        query = ("query($c:String!){ nodes(filter:[{cluster:{eq:$c}}]) { count items { "
                 "hostname cluster subCluster schedulerState healthState } } }")
        body = json.dumps({"query": query, "variables": {"c": cluster}}).encode()
        req = urllib.request.Request(self.server_url + "/query", data=body, headers={
            "X-Auth-Token": self.reader_token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            doc = json.loads(resp.read())
        if doc.get("errors"):
            raise CcBackendError(200, json.dumps(doc["errors"])[:2000])
        out = {n["hostname"]: dict(n) for n in doc["data"]["nodes"]["items"]}
        for row in self._latest_node_rows(cluster):
            if row["hostname"] in out:
                out[row["hostname"]].update(row)
        return out

    def _latest_node_rows(self, cluster: str) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT n.hostname, s.time_stamp, s.cpus_allocated, s.memory_allocated, "
            "s.gpus_allocated, s.jobs_running FROM node_state s JOIN node n "
            "ON n.id = s.node_id WHERE n.cluster = ? ORDER BY s.time_stamp, s.id", (cluster,))
        return list({r["hostname"]: dict(r) for r in rows}.values())

    def wait_committed(self, timeout: float = 300) -> None:
        """Until the job cache is empty (every start taken in is listed): cc-backend's
        commit worker moves it to the job table once per ``commit_interval``. With
        :data:`NO_COMMIT` at once: :meth:`jobs` reads the cache itself."""
        if self.commit_interval == NO_COMMIT:
            return
        until = time.time() + timeout
        while self.cached() > 0:
            if time.time() > until:
                raise TimeoutError(f"cc-backend's job cache not committed in {timeout} s")
            time.sleep(0.5)

    def job_rows(self, first_job_id: int = 0) -> int:
        """How many jobs cc-backend's database holds, committed or cached, of job ids from
        ``first_job_id`` on (a cheap progress count for a large delivery; what it holds is
        read through :meth:`jobs`)."""
        return sum(self._query(f"SELECT count(*) FROM {t} WHERE job_id >= ?",
                               (first_job_id,))[0][0] for t in ("job", "job_cache"))

    def cached(self, first_job_id: int = 0) -> int:
        """How many starts wait in cc-backend's job cache (its SQLite ``job_cache``; no API
        lists them), of job ids from ``first_job_id`` on."""
        return self._query("SELECT count(*) FROM job_cache WHERE job_id >= ?",
                           (first_job_id,))[0][0]

    def _cached_jobs(self) -> list[dict[str, Any]]:
        """The job cache's rows as ``GET /api/jobs/`` would list them after a commit (cc-lib's
        Job: ``omitempty`` leaves out empty values)."""
        return [_cache_row_as_job(dict(r))
                for r in self._query("SELECT * FROM job_cache ORDER BY id")]

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        """Rows of cc-backend's SQLite database, opened read-only beside the running server
        (it runs in WAL mode)."""
        db = sqlite3.connect(f"file:{self.directory / 'var' / 'job.db'}?mode=ro", uri=True,
                             timeout=30)
        try:
            db.row_factory = sqlite3.Row
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class CcBackendError(Exception):
    """cc-backend answered a read with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"cc-backend answered {status}: {body[:500]}")
        self.status = status


_START_KEYS = ("jobId", "cluster", "subCluster", "partition", "project", "user", "shared",
               "arrayJobId", "walltime", "numNodes", "numHwthreads", "numAcc", "startTime",
               "resources", "metaData", "energy", "footprint", "energyFootprint", "smt",
               "monitoringStatus")


_CACHE_COLUMNS = {  # job_cache column -> cc-lib Job key (migrations/sqlite3/09)
    "job_id": "jobId", "cluster": "cluster", "subcluster": "subCluster",
    "submit_time": "submitTime", "start_time": "startTime", "hpc_user": "user",
    "project": "project", "cluster_partition": "partition", "array_job_id": "arrayJobId",
    "duration": "duration", "walltime": "walltime", "job_state": "jobState",
    "num_nodes": "numNodes", "num_hwthreads": "numHwthreads", "num_acc": "numAcc",
    "smt": "smt", "shared": "shared", "monitoring_status": "monitoringStatus",
    "energy": "energy"}
_CACHE_JSON = {"meta_data": "metaData", "resources": "resources",
               "footprint": "footprint", "energy_footprint": "energyFootprint"}


def _cache_row_as_job(row: Mapping[str, Any]) -> dict[str, Any]:
    job = {key: row[col] for col, key in _CACHE_COLUMNS.items() if row.get(col)}
    job.update({"jobId": row["job_id"], "startTime": row["start_time"],
                "duration": row["duration"], "jobState": row["job_state"]})
    job.update({key: json.loads(row[col]) for col, key in _CACHE_JSON.items()
                if row.get(col) not in (None, "", "null")})
    return job


def _as_start(job: Mapping[str, Any]) -> dict[str, Any]:
    """cc-lib's Job omits an ``arrayJobId`` and a ``numAcc`` of 0 (``omitempty``)."""
    return {"arrayJobId": 0, "numAcc": 0, **{k: job[k] for k in _START_KEYS if k in job}}


def _as_stop(job: Mapping[str, Any]) -> dict[str, Any]:
    return {"jobId": job["jobId"], "cluster": job["cluster"], "startTime": job["startTime"],
            "stopTime": job["startTime"] + job["duration"], "jobState": job["jobState"]}


def scheduler_state(slurm_state: str) -> str:
    """The scheduler state cc-backend 1.5.4 stores for a node whose Slurm state is
    ``slurm_state`` (scontrol's ``State=``, flags joined by ``+``: ``IDLE+DRAIN``), sent as
    its parts (internal/api/node.go ``determineState``, the stand-in's restatement)."""
    return standin_scheduler_state(slurm_state.split("+"))
