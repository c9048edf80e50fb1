"""Allocation details and batch scripts from slurmctld, for the runs a caller names, by the
cheaper of two routes: single-job requests answered by a long-lived ``scontrol`` process
(``show job -d ID`` and ``write batch_script ID -`` for each, :mod:`.formats.scontrol`,
:mod:`.session`), or, when many
are needed, a dump of every job filtered by id while it is read, so that a queue of 50,000
pending jobs costs a dump only when a dump is cheaper (:class:`RouteCosts`). slurmctld holds
a job until MinJobAge after its end; what it no longer holds is left to slurmdbd."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Executor, wait
from dataclasses import dataclass, replace
from datetime import tzinfo

from ccadapter.errors import CcAdapterError, TransientSlurmError
from ccadapter.model import Job, base_state
from ccadapter.slurm.formats.listing import STEP_FIELDS, TIME_FORMAT_ENV, parse_step_jobs
from ccadapter.slurm.formats.records import ControllerJob, ParseContext
from ccadapter.slurm.formats.scontrol import Batch, parse_scontrol_jobs, show_job, write_script
from ccadapter.slurm.formats.sdiag import parse_sdiag
from ccadapter.slurm.hetjob import merge_jobs
from ccadapter.slurm.join import GpuPatterns, controller_job
from ccadapter.slurm.nodeboot import NodeBoot
from ccadapter.slurm.runner import CommandRunner

log = logging.getLogger(__name__)

CONTROLLER_BATCH = 500  # commands per scontrol process
HELD_JOBS_TTL = 30.0  # seconds an sdiag reading of the jobs slurmctld holds is used


@dataclass
class RouteCosts:
    """Which way to ask slurmctld about ``n`` jobs: single-job requests in one process cost
    about ``per_job`` seconds each; a dump of every job costs ``dump`` seconds whatever ``n``
    (it grows with the queue instead). Both are measured as the daemon runs, so the choice
    follows the site: a dump of 50,000 queued jobs is never taken for a handful of jobs, and
    a thousand jobs on a small cluster are read in one dump."""

    per_job: float = 0.005
    dump: float | None = None
    min_dump: int = 64  # below this, single requests always (a dump is never that cheap)
    first_dump: int = 500  # before any dump was measured
    # Never a dump of more jobs than this: slurmctld packs them all under its job read lock,
    # and every user's sbatch and squeue waits meanwhile (issue 47). How many it holds comes
    # from ``held_jobs`` (sdiag, :meth:`Slurmctld.held_jobs`); unknown means no dump.
    max_dump_jobs: int = 2_000
    held_jobs: Callable[[], int | None] | None = None

    def prefer_dump(self, n: int) -> bool:
        if n < self.min_dump:
            return False
        held = self.held_jobs() if self.held_jobs is not None else None
        if held is None or held > self.max_dump_jobs:
            return False
        if self.dump is None:
            return n >= self.first_dump
        return n * self.per_job > self.dump

    def saw_singles(self, n: int, seconds: float) -> None:
        if n:
            self.per_job = 0.7 * self.per_job + 0.3 * (seconds / n)

    def saw_dump(self, seconds: float) -> None:
        self.dump = seconds


class Slurmctld:
    """The jobs slurmctld holds, read for a :class:`~ccadapter.slurm.collector.Collector`
    (which owns one). ``scope``: the cluster asked (``--clusters NAME``; None: the local
    one, jobs asked with ``--local``) when a call names none; ``cluster_name()`` the name
    the jobs carry; ``version()`` the Slurm version for error messages."""

    def __init__(self, runner: CommandRunner, tz: tzinfo, gpu_patterns: GpuPatterns,
                 fetch_scripts: bool, cluster_name: Callable[[], str],
                 version: Callable[[], str], scope: str | None = None,
                 costs: RouteCosts | None = None, config_text: str = "") -> None:
        self.runner, self.tz = runner, tz
        self.gpu_patterns, self.fetch_scripts = gpu_patterns, fetch_scripts
        self.cluster_name, self.version, self.scope = cluster_name, version, scope
        self.costs = costs or RouteCosts()
        if self.costs.held_jobs is None:
            self.costs.held_jobs = self.held_jobs
        self._load: tuple[float, int | None] = (-HELD_JOBS_TTL, None)  # (read at, jobs)
        # batch scripts slurmdbd keeps, asked there first (Collector.stored_scripts)
        self.stored_scripts: Callable[[Sequence[int]], dict[int, str]] | None = None
        # asked once, briefly, not retried: the fast path waits on it, and unread means
        # "may boot"; the config the daemon read at its start counts as the first reading
        self.node_boot = NodeBoot(lambda: runner.run(["scontrol", *clusters_arg(scope), "show",
                                                      "config"], retry=False, timeout=5),
                                  known=config_text)

    def jobs(self, job_ids: Iterable[int], cluster: str | None = None,
             scripts_for: Collection[int] = (), beside: Executor | None = None
             ) -> tuple[list[Job], list[int]]:
        """Jobs as slurmctld holds them, without slurmdbd (the Prolog/Epilog fast path).
        Batch scripts are fetched for the ids in ``scripts_for`` (starts); with ``beside``,
        in a question of their own asked there while the jobs are asked (:meth:`_singles`).
        Returns the jobs and the ids it could not build (unknown, or a start time that falls
        in the repeated hour of a clock change): those are left to the poll.

        Each component of a het job has its own prolog and epilog, announcing its own id:
        a component read without its leader is read again with it (a second request, only
        then), so that the het job is built whole, under the leader's id."""
        ids = sorted(set(job_ids))
        version = self.version()
        want_scripts = set(scripts_for) if self.fetch_scripts else set()
        held, scripts, errors = self.records(ids, [i for i in ids if i in want_scripts],
                                             cluster, version, beside)
        leaders = sorted({c.het_job_id for c in held.values() if c.het_job_id} - set(held))
        if leaders:
            scripted = {c.het_job_id for c in held.values() if c.job_id in want_scripts}
            more, more_scripts, more_errors = self.records(
                leaders, [i for i in leaders if i in scripted], cluster, version, beside)
            held.update(more)
            scripts.update(more_scripts)
            errors += more_errors
        for err in errors:
            log.error("skipped: %s", err)
        jobs = merge_jobs(self._from_controller(held, scripts, cluster))
        covered = {i for job in jobs for i in job.slurm_ids}
        return jobs, [i for i in ids if i not in covered]

    def _from_controller(self, held: dict[int, ControllerJob], scripts: dict[int, str],
                         cluster: str | None) -> list[Job]:
        """A Job per record slurmctld holds; none for a het job one of whose components has
        a time that is not exactly known (it is left to the poll whole). A CONFIGURING job
        whose StartTime is final (:mod:`.nodeboot`) is running to the caller."""
        name = cluster or self.cluster_name()
        jobs: list[Job] = []
        unsure: set[int] = set()
        for job_id, ctl in sorted(held.items()):
            job = controller_job(ctl, name, self.tz, self.gpu_patterns)
            if job is None:
                if ctl.het_job_id:
                    unsure.add(ctl.het_job_id)
                continue
            if base_state(job.state) == "CONFIGURING" and self.node_boot.start_final(ctl):
                job = replace(job, state="RUNNING")
            if ctl.batch and job_id in scripts:  # a CONFIGURING task's too: its array keeps it
                job = replace(job, job_script=scripts[job_id])
            jobs.append(job)
        return [j for j in jobs if not (j.het_components and
                                        j.het_components[0].het_job_id in unsure)]

    def held_jobs(self) -> int | None:
        """How many jobs slurmctld holds (pending and running), by its own count (``sdiag``:
        no job lock, :mod:`.formats.sdiag`), read at most every ``HELD_JOBS_TTL`` seconds;
        None when sdiag cannot be asked or read (said at debug level: a dump is not taken)."""
        read_at, jobs = self._load
        if time.monotonic() - read_at < HELD_JOBS_TTL:
            return jobs
        try:
            text = self.runner.run(["sdiag", *(["-M", self.scope] if self.scope else [])],
                                   retry=False, timeout=5)
            jobs = parse_sdiag(text, self.version()).jobs
        except CcAdapterError as exc:
            log.debug("slurmctld's job count unknown (%s): no dump of every job", exc)
            jobs = None
        self._load = (time.monotonic(), jobs)
        return jobs

    def scripts(self, job_ids: Sequence[int], cluster: str | None = None) -> dict[int, str]:
        """The batch scripts of these jobs alone, when scripts are fetched at all (a job
        with none, e.g. an allocation, is left out)."""
        if not self.fetch_scripts or not job_ids:
            return {}
        _, found, errors = self.records([], job_ids, cluster, self.version())
        for err in errors:
            log.error("skipped: %s", err)
        return found

    def running_ids(self, cluster: str | None = None) -> set[int]:
        """The ids of the jobs that run now, from slurmctld's step list (why not its job
        list: :data:`~ccadapter.slurm.formats.listing.STEP_FIELDS`); raises
        SlurmCommandError when slurmctld cannot be asked."""
        out = self.runner.run(["squeue", "--all", "-h", "-s", "-O", STEP_FIELDS,
                               *jobs_scope(cluster or self.scope)])
        ids, errors = parse_step_jobs(out, ParseContext(self.version(), "squeue -s"))
        for err in errors:
            log.error("skipped: %s", err)
        return ids

    def records(self, ids: Sequence[int], script_ids: Sequence[int], cluster: str | None,
                version: str, beside: Executor | None = None
                ) -> tuple[dict[int, ControllerJob], dict[int, str], list[str]]:
        """Allocation details of ``ids`` and batch scripts of ``script_ids`` from slurmctld,
        by the cheaper route (:class:`RouteCosts`); ``beside``: :meth:`_singles`. Records
        that cannot be read are error strings; raises SlurmCommandError when slurmctld
        cannot be asked at all."""
        if not ids and not script_ids:
            return {}, {}, []
        ctx = ParseContext(version, "scontrol show job -d")
        held: dict[int, ControllerJob] = {}
        scripts: dict[int, str] = {}
        errors: list[str] = []
        singles = list(ids)
        if self.costs.prefer_dump(len(ids)):
            held, errors = self._dump(ids, cluster, ctx)
            singles = []
        for i in range(0, max(len(singles), len(script_ids)), CONTROLLER_BATCH):
            part, found, errs = self._singles(singles[i:i + CONTROLLER_BATCH],
                                              script_ids[i:i + CONTROLLER_BATCH], cluster, ctx,
                                              beside)
            held.update(part)
            scripts.update(found)
            errors += errs
        return held, scripts, errors

    def _singles(self, ids: Sequence[int], script_ids: Sequence[int], cluster: str | None,
                 ctx: ParseContext, beside: Executor | None = None
                 ) -> tuple[dict[int, ControllerJob], dict[int, str], list[str]]:
        """``show job ID`` for each id, then ``write batch_script``, asked of the runner's
        long-lived scontrol (:meth:`~ccadapter.slurm.runner.SlurmRunner.ask`). With
        ``beside``, the scripts are asked there, of another scontrol, while this thread asks
        the jobs: slurmctld answers the two at once, and a start then costs the slower of
        two requests, not both in turn (each waits for slurmctld's locks while its scheduler
        walks a long queue). Their Slurm commands count for ``beside``'s thread."""
        if not ids and not script_ids:
            return {}, {}, []
        if beside is not None and ids and script_ids:
            asked = beside.submit(self._scripts_of, script_ids, cluster, ctx)
            try:
                held, _, errors = self._singles(ids, [], cluster, ctx)
            finally:
                wait([asked])  # its scontrol is free again when the caller asks next
            _, scripts, more = asked.result()
            return held, scripts, errors + more
        batch = Batch.of([*map(show_job, ids), *map(write_script, script_ids)])
        started = time.monotonic()
        done = self.runner.ask(["scontrol", *jobs_scope(cluster or self.scope), "-d"],
                               batch.stdin(), batch.complete, env=TIME_FORMAT_ENV)
        self.costs.saw_singles(len(ids), time.monotonic() - started)
        answers = batch.answers(done.stdout)
        if done.transient and not any(answers):
            raise TransientSlurmError(["scontrol", "-d"], "slurmctld could not be reached",
                                      done.stderr)
        held, errors = parse_scontrol_jobs(
            (line for a in answers[:len(ids)] if a for line in a.split("\n")), ctx, set(ids))
        scripts = {job_id: text for job_id, text in zip(script_ids, answers[len(ids):],
                                                        strict=True) if text}
        return held, scripts, errors

    def _scripts_of(self, script_ids: Sequence[int], cluster: str | None, ctx: ParseContext
                    ) -> tuple[dict[int, ControllerJob], dict[int, str], list[str]]:
        """The scripts slurmdbd keeps (no slurmctld RPC: issue 47), slurmctld's for the rest
        (slurmdbd had not recorded the submission yet, or keeps none)."""
        found = self.stored_scripts(script_ids) if self.stored_scripts else {}
        rest = [i for i in script_ids if i not in found]
        _, scripts, errors = self._singles([], rest, cluster, ctx) if rest else ({}, {}, [])
        return {}, {**found, **scripts}, errors

    def _dump(self, ids: Sequence[int], cluster: str | None,
              ctx: ParseContext) -> tuple[dict[int, ControllerJob], list[str]]:
        """Every job slurmctld holds, read line by line and filtered by id as it streams."""
        started = time.monotonic()
        lines = self.runner.lines(["scontrol", *jobs_scope(cluster or self.scope), "-d",
                                   "show", "job"], env=TIME_FORMAT_ENV)
        held, errors = parse_scontrol_jobs(lines, ctx, set(ids))
        self.costs.saw_dump(time.monotonic() - started)
        return held, errors


def clusters_arg(cluster: str | None) -> list[str]:
    """``--clusters NAME`` where a cluster is named; nothing for the local one."""
    return ["--clusters", cluster] if cluster else []


def jobs_scope(cluster: str | None) -> list[str]:
    """``--clusters NAME``, or ``--local`` for the local cluster, on every question about
    jobs. Without either, scontrol and squeue first ask slurmctld whether the cluster is in
    a federation, one more request with two more munge credentials (``slurm_load_job`` in
    src/api/job_info.c, ``slurm_get_job_steps`` in src/api/job_step_info.c), which makes
    a ``show job`` cost about twice as much. The daemon reports its own cluster's runs, as
    ``sacct --clusters`` records them: a federation sibling's copy of a job is not one
    (``--clusters`` implies ``--local``, scontrol's and squeue's manuals say)."""
    return clusters_arg(cluster) or ["--local"]
