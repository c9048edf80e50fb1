"""Queries Slurm and turns its answers into :class:`~ccadapter.model.Job` runs.

Cost is fixed per query, not per job: one ``sacct`` for a time window or a list of ids,
one ``scontrol show job -d`` for the allocations of every job slurmctld still holds, and
(24.11+) one ``sacct -B -j IDS`` for the batch scripts slurmdbd stored. Only scripts that
slurmdbd does not have take one call per job (``scontrol write batch_script``), with bounded
parallelism, and only for jobs slurmctld still has.

A record that cannot be read is reported with its job id and skipped; it never costs the
rest of the window.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import tzinfo

from ccadapter.config import Config
from ccadapter.errors import SlurmCommandError, SlurmParseError
from ccadapter.model import Job, JobState, Resource, Shared, cc_state
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats._common import (
    ControllerJob,
    NodeState,
    ParseContext,
    SacctRecord,
    SlurmVersion,
    expand_hostlist,
    parse_cluster_name,
    parse_nodes,
    parse_scontrol_jobs,
    parse_squeue,
    version_from_meta,
    version_from_text,
)
from ccadapter.slurm.runner import CommandRunner
from ccadapter.slurm.timefmt import local_zone, sacct_bound, wall_readings

log = logging.getLogger(__name__)

# Given runs (jobId, startTime), the ones whose start is stored already.
KnownRuns = Callable[[list[tuple[int, int]]], set[tuple[int, int]]]

# slurmctld keeps finished jobs for MinJobAge (300 s by default); an hour covers generous
# settings without asking slurmctld about windows far in the past.
_CONTROLLER_MEMORY = 3600
# squeue states of jobs that have not ended (still on nodes, or queued again)
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED",
                           "RESIZING", "SIGNALING", "STAGE_OUT", "PENDING", "REQUEUED",
                           "REQUEUE_HOLD", "REQUEUE_FED"})
# stale-jobs and nodestate run back to back: within this many seconds, one squeue serves both
_SQUEUE_TTL = 0.5


@dataclass
class QueryResult:
    jobs: list[Job]
    version: SlurmVersion
    errors: list[str] = field(default_factory=list)


class Collector:
    """Reads jobs of one Slurm installation through a :class:`CommandRunner`."""

    def __init__(
        self,
        runner: CommandRunner,
        config: Config,
        clock: Callable[[], float] = time.time,
        tz: tzinfo | None = None,
        squeue_ttl: float = _SQUEUE_TTL,
    ) -> None:
        self.runner = runner
        self.config = config
        self.clock = clock
        self.tz = tz or local_zone()
        self._gpu_patterns = config.gpu_pci_patterns()
        self._known_version: str | None = None  # for error messages only
        self._cluster: str | None = None
        self._squeue_ttl = squeue_ttl
        self._squeue_lock = threading.Lock()
        self._squeue_cache: tuple[str | None, float, dict[int, tuple[str, str]]] | None = None

    # --- public queries --------------------------------------------------------------------

    def window(self, since: float, until: float | None = None,
               cluster: str | None = None, known: KnownRuns | None = None) -> QueryResult:
        """Every run active in [since, until]; ``until=None`` means now. ``known`` names
        the runs (jobId, startTime) whose start was captured already: their batch scripts
        are not fetched again (on 22.05 that is one ``scontrol`` call per job and cycle)."""
        end = "now" if until is None else sacct_bound(until, self.tz, is_start=False)
        args = ["--starttime", sacct_bound(since, self.tz, is_start=True), "--endtime", end]
        return self._query(args, cluster, wanted=None, known=known)

    def jobs_by_id(self, job_ids: Iterable[int], cluster: str | None = None) -> QueryResult:
        """The runs of the given job ids (raw ids, as in SLURM_JOB_ID)."""
        ids = sorted(set(job_ids))
        if not ids:
            return QueryResult([], self.version())
        return self._query(["--jobs", ",".join(map(str, ids))], cluster, wanted=set(ids))

    def cluster_name(self) -> str:
        """The local cluster's name, as jobs carry it."""
        out = self.runner.run(["scontrol", "show", "config"])
        name = parse_cluster_name(out)
        if not name:
            raise SlurmParseError(self._version_text(), "scontrol show config",
                                  "no ClusterName line")
        return name

    def active_jobs(self, cluster: str | None = None) -> dict[int, str]:
        """Raw job id -> state of every job slurmctld holds (one squeue call)."""
        return {job_id: state for job_id, (state, _) in self._squeue(cluster).items()}

    def running_ids(self, cluster: str | None = None) -> set[int]:
        """Jobs slurmctld still has on nodes or queued (for cc-backend: not ended)."""
        return {job_id for job_id, state in self.active_jobs(cluster).items()
                if state in ACTIVE_STATES}

    def _squeue(self, cluster: str | None) -> dict[int, tuple[str, str]]:
        """One ``squeue`` answer serves every reconciler of a cycle (stale-jobs and nodestate
        run within a second of each other): a cycle costs one call, not one per user."""
        with self._squeue_lock:
            cached = self._squeue_cache
            if cached and cached[0] == cluster and time.monotonic() - cached[1] < self._squeue_ttl:
                return cached[2]
            out = self.runner.run(["squeue", *_clusters(cluster), "-h", "-t", "all",
                                   "-o", "%A %T %N"])
            jobs = parse_squeue(out)
            self._squeue_cache = (cluster, time.monotonic(), jobs)
            return jobs

    def nodes(self, cluster: str | None = None) -> tuple[list[NodeState], dict[str, int]]:
        """Node states and, per host, how many jobs run there."""
        out = self.runner.run(["scontrol", *_clusters(cluster), "-o", "show", "node"])
        nodes, errors = parse_nodes(out, ParseContext(self._known_version or "unknown",
                                                      "scontrol -o show node"))
        for err in errors:
            log.error("skipped: %s", err)
        counts: dict[str, int] = {}
        ctx = ParseContext(self._known_version or "unknown", "squeue")
        for job_id, (state, nodelist) in self._squeue(cluster).items():
            if state in ("RUNNING", "COMPLETING", "SUSPENDED"):
                try:
                    hosts = expand_hostlist(nodelist, ctx.for_job(job_id))
                except SlurmParseError as exc:  # one bad line costs its job's count only
                    log.error("skipped: %s", exc)
                    continue
                for host in hosts:
                    counts[host] = counts.get(host, 0) + 1
        return nodes, counts

    def controller_jobs(self, job_ids: Iterable[int],
                        cluster: str | None = None) -> tuple[list[Job], list[int]]:
        """Jobs as slurmctld holds them, without slurmdbd (the Prolog/Epilog fast path).
        One call: ``scontrol show job -d ID`` for one job, all jobs for several. Returns
        the jobs and the ids it could not build (unknown, or a start time that falls in
        the repeated hour of a clock change): those are left to the poll."""
        ids = sorted(set(job_ids))
        target = [str(ids[0])] if len(ids) == 1 else []
        argv = ["scontrol", *_clusters(cluster), "show", "job", "-d", *target]
        out = self.runner.run(argv)
        out = "\n".join(ln for ln in out.splitlines() if not ln.startswith("CLUSTER:"))
        held, errors = parse_scontrol_jobs(out, ParseContext(self._known_version or "unknown",
                                                             "scontrol show job -d"))
        for err in errors:
            log.error("skipped: %s", err)
        name = cluster or self.cluster_name_cached()
        jobs, missing = [], []
        for job_id in ids:
            ctl = held.get(job_id)
            job = controller_job(ctl, name, self.tz, self._gpu_patterns) if ctl else None
            if job:
                jobs.append(job)
            else:
                missing.append(job_id)
        scripts = self._controller_scripts(
            [j.job_id for j in jobs if j.started and held[j.job_id].batch], cluster)
        jobs = [replace(j, job_script=scripts.get(j.job_id, "")) for j in jobs]
        return jobs, missing

    def cluster_name_cached(self) -> str:
        if self._cluster is None:
            self._cluster = self.cluster_name()
        return self._cluster

    def version(self) -> SlurmVersion:
        out = self.runner.run(["sacct", "-V"])
        return version_from_text(out, "sacct -V")

    # --- steps -----------------------------------------------------------------------------

    def _query(self, args: list[str], cluster: str | None, wanted: set[int] | None,
               known: KnownRuns | None = None) -> QueryResult:
        argv = ["sacct", "--json", "--allusers", "--duplicates", *args, *_clusters(cluster)]
        with _gc_paused():
            doc = self._json(argv)
            command = " ".join(argv[:2])
            version = version_from_meta(doc, command)
            self._known_version = str(version)
            parser = format_for(version, command)
            ctx = ParseContext(str(version), command)
            records, errors = _parse_records(doc, parser, ctx, wanted)
            del doc
        controller: dict[int, ControllerJob] = {}
        if self._needs_controller(records):
            controller, ctl_errors = self._controller(cluster, str(version))
            errors.extend(ctl_errors)
        scripts = self._scripts(records, controller, cluster, parser, ctx, known)
        jobs = []
        for rec in records:
            ctl = controller.get(rec.job_id)
            if ctl is not None and rec.start_time not in wall_readings(ctl.start_time, self.tz):
                ctl = None  # another run of a requeued job
            jobs.append(build_job(rec, ctl, scripts.get(rec.job_id, ""), self._gpu_patterns))
        for err in errors:
            log.error("skipped: %s", err)
        return QueryResult(jobs, version, errors)

    def _json(self, argv: list[str]) -> dict:
        out = self.runner.run(argv)
        try:
            doc = json.loads(out)
        except (ValueError, RecursionError) as exc:
            # Besides JSONDecodeError: ValueError for an integer past Python's 4,300-digit
            # limit, RecursionError for nesting past the decoder's depth.
            raise SlurmParseError(self._version_text(), " ".join(argv[:2]),
                                  f"output is not JSON ({exc}): {out[:120]!r}") from None
        if not isinstance(doc, dict):
            raise SlurmParseError(self._version_text(), " ".join(argv[:2]),
                                  "output is not a JSON object")
        return doc

    def _version_text(self) -> str:
        if self._known_version:
            return self._known_version
        try:
            return str(self.version())
        except (SlurmCommandError, SlurmParseError):
            return "unknown"

    def _needs_controller(self, records: Sequence[SacctRecord]) -> bool:
        horizon = self.clock() - _CONTROLLER_MEMORY
        return any(r.start_time and r.nodes and (r.end_time == 0 or r.end_time >= horizon)
                   for r in records)

    def _controller(self, cluster: str | None, version: str) -> tuple[dict, list[str]]:
        argv = ["scontrol", *_clusters(cluster), "show", "job", "-d"]
        try:
            out = self.runner.run(argv)
        except SlurmCommandError as exc:
            # Allocation details are an improvement, not a precondition: without them the
            # jobs still carry their hostnames, and the next cycle tries again.
            return {}, [f"allocation details unavailable: {exc}"]
        out = "\n".join(ln for ln in out.splitlines() if not ln.startswith("CLUSTER:"))
        return parse_scontrol_jobs(out, ParseContext(version, "scontrol show job -d"))

    def _scripts(self, records: Sequence[SacctRecord], controller: dict[int, ControllerJob],
                 cluster: str | None, parser, ctx: ParseContext,
                 known: KnownRuns | None = None) -> dict[int, str]:
        if not self.config.slurm_fetch_job_scripts:
            return {}
        started = [r for r in records if r.start_time and r.nodes and not r.script]
        have = known([(r.job_id, r.start_time) for r in started]) if known and started else set()
        todo = [r.job_id for r in started if (r.job_id, r.start_time) not in have]
        scripts: dict[int, str] = {}
        if todo and parser.SACCT_HAS_SCRIPTS:
            scripts = self._stored_scripts(todo, cluster, parser, ctx)
        held = [i for i in todo
                if i not in scripts and i in controller and controller[i].batch]
        if held:
            scripts.update(self._controller_scripts(held, cluster))
        return scripts

    def _stored_scripts(self, ids: list[int], cluster: str | None, parser,
                        ctx: ParseContext) -> dict[int, str]:
        """Scripts slurmdbd stored (AccountingStoreFlags=job_script): one call for all."""
        argv = ["sacct", "--json", "--allusers", "--duplicates", "-B",
                "--jobs", ",".join(map(str, ids)), *_clusters(cluster)]
        try:
            records, _ = _parse_records(self._json(argv), parser, ctx, set(ids))
        except (SlurmCommandError, SlurmParseError) as exc:
            log.warning("batch scripts from slurmdbd unavailable: %s", exc)
            return {}
        return {r.job_id: r.script for r in records if r.script}

    def _controller_scripts(self, ids: list[int], cluster: str | None) -> dict[int, str]:
        def fetch(job_id: int) -> tuple[int, str]:
            argv = ["scontrol", *_clusters(cluster), "write", "batch_script", str(job_id), "-"]
            try:
                return job_id, self.runner.run(argv, retry=False)
            except SlurmCommandError as exc:
                log.debug("no batch script for job %d: %s", job_id, exc)
                return job_id, ""

        with ThreadPoolExecutor(max_workers=self.config.slurm_script_parallelism) as pool:
            return {i: text for i, text in pool.map(fetch, ids) if text}


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoding a large sacct answer creates millions of acyclic objects; the cyclic garbage
    collector would scan them again and again (it doubles the decode time of a 10k-job
    window). Nothing created here forms cycles, so collection waits until the end."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _clusters(cluster: str | None) -> list[str]:
    return ["--clusters", cluster] if cluster else []


def _parse_records(doc: dict, parser, ctx: ParseContext,
                   wanted: set[int] | None) -> tuple[list[SacctRecord], list[str]]:
    raw = doc.get("jobs")
    if not isinstance(raw, list):
        raise ctx.error("output has no 'jobs' list")
    records: list[SacctRecord] = []
    errors: list[str] = []
    for item in raw:
        try:
            rec = parser.parse_sacct_job(item, ctx)
        except SlurmParseError as exc:
            errors.append(str(exc))
            continue
        if wanted is None or rec.job_id in wanted:
            records.append(rec)
    return records, errors


def build_job(rec: SacctRecord, ctl: ControllerJob | None, script: str,
              gpu_patterns: list) -> Job:
    """Join what slurmdbd and slurmctld know of one run. Pure."""
    if ctl is not None and ctl.nodes:
        resources = tuple(
            Resource(n.hostname, n.cpu_ids, _accelerators(n.hostname, n.gpu_indices, gpu_patterns))
            for n in ctl.nodes
        )
    else:
        resources = tuple(Resource(h) for h in rec.nodes) if rec.start_time else ()
    gpus = sum(len(n.gpu_indices) for n in ctl.nodes) if ctl else 0
    shared = rec.shared or (ctl.shared if ctl else Shared.MULTI_USER)
    return Job(
        job_id=rec.job_id,
        cluster=rec.cluster,
        partition=rec.partition,
        account=rec.account,
        user=rec.user,
        group=rec.group,
        name=rec.name,
        state=rec.state.upper(),
        submit_time=rec.submit_time,
        start_time=rec.start_time,
        end_time=rec.end_time,
        time_limit=rec.time_limit,
        num_nodes=max(rec.num_nodes, len(resources)),
        num_hwthreads=rec.num_hwthreads,
        num_acc=rec.num_gpus if rec.num_gpus is not None else gpus,
        shared=shared,
        resources=resources,
        array_job_id=rec.array_job_id,
        array_task_id=rec.array_task_id,
        exit_code=rec.exit_code,
        slurm_info=ctl.text if ctl else "",
        job_script=rec.script or script,
        allocation_known=bool(ctl and ctl.nodes),
    )


def controller_job(ctl: ControllerJob, cluster: str, tz: tzinfo,
                   gpu_patterns: list) -> Job | None:
    """A Job from slurmctld's view alone; None when a time is not exactly known. Pure."""
    times = []
    for text in (ctl.submit_time, ctl.start_time, ctl.end_time):
        readings = wall_readings(text, tz)
        if len(readings) > 1:
            return None  # the repeated hour of a clock change: let sacct decide
        times.append(readings[0] if readings else 0)
    submit, start, end = times
    state = ctl.state.upper()
    running = cc_state(state) in (None, JobState.RUNNING)
    resources = tuple(
        Resource(n.hostname, n.cpu_ids, _accelerators(n.hostname, n.gpu_indices, gpu_patterns))
        for n in ctl.nodes)
    return Job(
        job_id=ctl.job_id, cluster=cluster, partition=ctl.partition, account=ctl.account,
        user=ctl.user, group=ctl.group, name=ctl.name, state=state,
        submit_time=submit, start_time=start if resources else 0,
        end_time=0 if running else end, time_limit=ctl.time_limit,
        num_nodes=len(resources), num_hwthreads=ctl.num_cpus,
        num_acc=ctl.gpus if ctl.gpus is not None else sum(len(n.gpu_indices) for n in ctl.nodes),
        shared=ctl.shared, resources=resources, array_job_id=ctl.array_job_id,
        array_task_id=ctl.array_task_id, exit_code=ctl.exit_code, slurm_info=ctl.text,
        allocation_known=bool(ctl.nodes),
    )


def _accelerators(host: str, indices: tuple[int, ...], patterns: list) -> tuple[str, ...]:
    """PCI addresses from gpuPciAddrs (first matching host regex wins), else the index."""
    if not indices:
        return ()
    for pattern, addrs in patterns:
        if pattern.search(host):
            out = []
            for idx in indices:
                if idx < len(addrs):
                    out.append(addrs[idx])
                else:
                    log.warning("gpuPciAddrs for %s lists %d GPUs, job uses index %d; "
                                "sending the index", host, len(addrs), idx)
                    out.append(str(idx))
            return tuple(out)
    return tuple(str(i) for i in indices)
