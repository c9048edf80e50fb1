"""Queries Slurm and turns its answers into :class:`~ccadapter.model.Job` runs, at a cost that
follows what changed, not what Slurm holds.

A busy site keeps 10,000 to 100,000 jobs queued; none of them matters until it runs. So:

- *Which runs exist* comes from listings (``sacct -X -P``, one short line per run that ended
  in a window, and slurmctld's steps for the jobs that run: :mod:`ccadapter.reconcilers.activity`).
  Pending jobs are in neither; in an unfiltered sacct window every eligible one is.
- *Details* are asked only for the runs a caller names (``sacct --json -X -j IDS``), at most
  :data:`IDS_PER_QUERY` ids per call, and handed over batch by batch (:meth:`Collector.iter_jobs`),
  so memory is bounded by a batch, never by a window or a 60,000-run catch-up.
- *Allocation details* (exact CPU ids, GPU indices: ``scontrol show job -d``) only for runs that
  may need a start and that slurmctld still holds, by the cheaper of two routes
  (:class:`RouteCosts`): single-job requests answered by one ``scontrol`` process, or, when
  many are needed, a dump of every job filtered by id while it is read.
- *Batch scripts* from slurmdbd in the same sacct call (``-B``, 24.11+), else from slurmctld in
  the same scontrol process (``write batch_script ID -``): a fixed number of processes per
  cycle on every version, not one per job.

A heterogeneous job is one run under its leader's id everywhere it leaves the collector: the
listing's components become one stamp (so the outbox is compared by the leader's id), details
are asked for the leader (sacct and scontrol answer with every component), and the components
read become one Job (:mod:`.hetjob`).

A record that cannot be read is reported with its job id and skipped; it never costs the rest
of the answer, and its id is handed back (``unparsed``) so that the caller asks it again
later (:mod:`ccadapter.outbox.unparsed`); a batch that ``sacct --json`` cannot answer at all
is split until the record at fault stands alone (:mod:`.details`). A listing line without a
readable job id fails the listing: the run it names could not be asked again by id.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, tzinfo
from typing import TYPE_CHECKING

from ccadapter.errors import CcAdapterError, SlurmCommandError
from ccadapter.model import UNKNOWN_ENDED, Job, base_state, known_state
from ccadapter.report.loggate import LogGate
from ccadapter.slurm.controller import RouteCosts, Slurmctld, clusters_arg
from ccadapter.slurm.details import DetailReader
from ccadapter.slurm.formats import SUPPORTED, format_for, newer_than_verified
from ccadapter.slurm.formats.listing import FIELDS, LISTING_ENV, RAN, RunStamp, parse_listing
from ccadapter.slurm.formats.records import ParseContext, SacctRecord, SlurmVersion
from ccadapter.slurm.formats.text import stores_scripts
from ccadapter.slurm.hetjob import merge_jobs, merge_stamps
from ccadapter.slurm.installation import SlurmInstallation
from ccadapter.slurm.join import GpuPatterns, build_job
from ccadapter.slurm.resize import fold_resized
from ccadapter.slurm.runner import CommandRunner
from ccadapter.slurm.timefmt import local_zone, readings, sacct_bound

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ccadapter.config.keys import Config

log = logging.getLogger(__name__)
# an error about one job's record ("Slurm 22.05.8, `sacct --json`: job 87649: ..."), which
# ccadapter.outbox.unparsed keeps and reminds of
_NAMES_A_JOB = re.compile(r"`: job \d+: ")

# Given runs (jobId, startTime), the ones whose start is stored already.
KnownRuns = Callable[[list[tuple[int, int]]], set[tuple[int, int]]]

# slurmctld keeps finished jobs for MinJobAge (300 s by default); an hour covers generous
# settings without asking slurmctld about runs far in the past.
CONTROLLER_MEMORY = 3600
# Job ids per `sacct -j` (listing and JSON; what records weigh: BENCHMARKS.md, "Collector:
# parse time"). slurmdbd asks `id_job IN (..) OR het_job_id IN (..) OR id_array_job IN (..)`;
# from 200 values on (MariaDB's and MySQL's eq_range_index_dive_limit) MariaDB estimates
# from index statistics, where most jobs' het and array ids are 0, and reads the whole job
# table instead, a cost that grows with the history, where 199 ids are an index lookup.
IDS_PER_QUERY = 190


@dataclass
class QueryResult:
    jobs: list[Job]
    version: SlurmVersion | None
    errors: list[str] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)  # ids whose record could not be read


@dataclass
class Listing:
    stamps: list[RunStamp]
    errors: list[str] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)  # ids whose line could not be read


@dataclass(frozen=True)
class CollectorSettings:
    """What the collector depends on, from the config. ``energy``: keep the consumed energy
    slurmdbd accounted on the runs read (it goes to cc-backend over REST only, so only when
    ``ccRestUrl`` is set)."""

    gpu_patterns: GpuPatterns = field(default_factory=list)
    fetch_job_scripts: bool = True
    energy: bool = True

    @classmethod
    def from_config(cls, config: Config) -> CollectorSettings:
        return cls(config.gpu_pci_patterns(), config.slurm_fetch_job_scripts,
                   energy=bool(config.cc_rest_url))


class Collector(SlurmInstallation):
    """Reads jobs of one Slurm installation through a :class:`CommandRunner`: the run
    listing and the sacct details share the caches of the version and the name and the
    per-cluster argument with the installation's facts (:class:`SlurmInstallation`);
    slurmctld's side is :class:`Slurmctld`."""

    def __init__(
        self,
        runner: CommandRunner,
        settings: CollectorSettings | None = None,
        clock: Callable[[], float] = time.time,
        tz: tzinfo | None = None,
        costs: RouteCosts | None = None,
        cluster: str | None = None,
        config_text: str = "",
    ) -> None:
        """``cluster``: the cluster every query asks (``--clusters NAME``) when the call
        names none; None asks the local one, without ``--clusters``. ``config_text``: its
        ``scontrol show config`` where it was read already (:attr:`config_text`)."""
        super().__init__(runner, cluster, config_text)
        self.settings = settings or CollectorSettings()
        self.clock = clock
        self.tz = tz or local_zone()
        self._warned_newer = False  # said once that this release is newer than verified
        self._unknown_states: set[str] = set()  # Slurm job states said to be unknown
        self._sacct_has_scripts = False  # its release's sacct JSON carries scripts (once read)
        self._reader = DetailReader(runner, self._version_text, self._seen)
        # a record that does not read is asked again (ccadapter.outbox.unparsed), which
        # says the ids it keeps once an hour with the latest error: each record's own error
        # is said when first seen and then once a day (three lines an hour for two bad
        # records made a quiet day of the month-of-life run 241 lines); other errors hourly
        self._said = LogGate(3600.0, clock)
        self._said_record = LogGate(86400.0, clock)
        self.slurmctld = Slurmctld(runner, self.tz, self.settings.gpu_patterns,
                                   self.settings.fetch_job_scripts, self.cluster_name_cached,
                                   lambda: self._known_version or "unknown", cluster, costs,
                                   config_text)
        self.slurmctld.stored_scripts = self.stored_scripts

    # --- which runs exist -----------------------------------------------------------------

    def stamps(self, since: float, until: float | None = None, cluster: str | None = None,
               asked: Sequence[str] = RAN) -> Listing:
        """Every run that ran during [since, until] (``until=None``: now), one line each;
        with ``asked=ENDED`` the runs that ended then (what polls ask: see
        :mod:`ccadapter.reconcilers.activity`); with ``asked=()`` also the jobs that were
        pending or eligible then (sacct's unfiltered window: every queued job of a busy site)."""
        end = "now" if until is None else sacct_bound(until, UTC, is_start=False)
        return self._listing([*asked, "--starttime", sacct_bound(since, UTC, is_start=True),
                              "--endtime", end], cluster)

    def stamps_of(self, job_ids: Iterable[int], cluster: str | None = None) -> Listing:
        """Every run of these job ids, whenever it ran (requeued jobs have several)."""
        out = Listing([])
        ids = sorted(set(job_ids))
        for i in range(0, len(ids), IDS_PER_QUERY):
            part = self._listing(["--jobs", ",".join(map(str, ids[i:i + IDS_PER_QUERY]))],
                                 cluster)
            out.stamps += part.stamps
            out.errors += part.errors
            out.unparsed += part.unparsed
        return out

    def _listing(self, args: list[str], cluster: str | None) -> Listing:
        argv = ["sacct", "-X", "-n", "-P", "--allusers", "--duplicates", *args,
                "-o", FIELDS, *clusters_arg(cluster or self.cluster)]
        out = self.runner.run(argv, env=LISTING_ENV)
        stamps, errors = parse_listing(out, ParseContext(self._known_version or "", "sacct -P"))
        if errors and not self._known_version:  # errors name the version: ask it now
            stamps, errors = parse_listing(out, ParseContext(self._version_text(), "sacct -P"))
        anonymous = [e for e in errors if e.job_id is None]
        if anonymous:  # a run that cannot be named cannot be asked again: fail the listing
            raise anonymous[0]
        self._say_skipped(errors)
        self._say_unknown_states(s.state for s in stamps)
        return Listing(merge_stamps(fold_resized(stamps)), [str(e) for e in errors],
                       [e.job_id for e in errors if e.job_id is not None])

    # --- details of named runs ------------------------------------------------------------

    def iter_jobs(self, job_ids: Iterable[int], cluster: str | None = None,
                  starts: Collection[int] | None = None,
                  known: KnownRuns | None = None) -> Iterator[QueryResult]:
        """The runs of these job ids, :data:`IDS_PER_QUERY` ids at a time. ``starts``: the ids
        whose start may still be needed (allocation details and scripts are asked for those
        only); None means all. ``known`` names the runs whose start is stored already."""
        ids = sorted(set(job_ids))
        for i in range(0, len(ids), IDS_PER_QUERY):
            chunk = ids[i:i + IDS_PER_QUERY]
            want = set(chunk) if starts is None else set(chunk) & set(starts)
            yield self._details(chunk, cluster, want, known)

    def jobs_by_id(self, job_ids: Iterable[int], cluster: str | None = None,
                   starts: Collection[int] | None = None) -> QueryResult:
        """All runs of these job ids in one result (for small sets)."""
        return _merged(self.iter_jobs(job_ids, cluster, starts))

    def iter_window(self, since: float, until: float | None = None,
                    cluster: str | None = None, known: KnownRuns | None = None,
                    ran_only: bool = True) -> Iterator[QueryResult]:
        """Every run that ran during [since, until], batch by batch (``backfill``); with
        ``ran_only=False`` also the jobs pending then, as never-started runs (``jobs``)."""
        listing = self.stamps(since, until, cluster, RAN if ran_only else ())
        ids = [s.job_id for s in listing.stamps if s.started or not ran_only]
        first = True
        for result in self.iter_jobs(ids, cluster, known=known):
            if first:
                result.errors[:0] = listing.errors
                first = False
            yield result
        if first:
            yield QueryResult([], None, listing.errors)

    def window(self, since: float, until: float | None = None, cluster: str | None = None,
               known: KnownRuns | None = None, ran_only: bool = False) -> QueryResult:
        """Every job active during [since, until] in one result, pending ones included
        (the administrator's view of ``ccadapter jobs``)."""
        return _merged(self.iter_window(since, until, cluster, known, ran_only))

    def _details(self, ids: list[int], cluster: str | None, starts: set[int],
                 known: KnownRuns | None) -> QueryResult:
        scripts_wanted = self.settings.fetch_job_scripts and bool(starts)
        read = self._reader.read(ids, scripts_wanted, clusters_arg(cluster or self.cluster))
        records, version, unparsed, errors = fold_resized(read.records), read.version, \
            read.unparsed, read.errors
        # A het job's components follow their leader: it alone is compared with the outbox
        # and asked of slurmctld (whose answer carries every component).
        leading = [r for r in records if not r.het_offset]
        have = _known_runs(leading, known)
        fresh = [r for r in leading if r.job_id in starts
                 and (r.job_id, r.start_time) not in have and r.start_time and r.nodes]
        horizon = self.clock() - CONTROLLER_MEMORY
        held = sorted({r.job_id for r in fresh if r.end_time == 0 or r.end_time >= horizon})
        no_script = {r.job_id for r in fresh if not r.script} if scripts_wanted else set()
        try:
            controller, scripts, ctl_errors = self.slurmctld.records(
                held, [i for i in held if i in no_script], cluster, self._known_version or "")
        except SlurmCommandError as exc:
            # Allocation details are an improvement, not a precondition: without them the
            # runs still carry their hostnames, and the next cycle tries again.
            controller, scripts, ctl_errors = {}, {}, [f"allocation details unavailable: {exc}"]
        errors += ctl_errors
        jobs = []
        for rec in records:
            ctl = controller.get(rec.job_id)
            if ctl is not None and rec.start_time not in readings(ctl.start_time, self.tz):
                ctl = None  # another run of a requeued job
            script = scripts.get(rec.job_id, "") if ctl is not None and ctl.batch else ""
            job = build_job(rec, ctl, script, self.settings.gpu_patterns)
            jobs.append(job if self.settings.energy else replace(job, energy=None))
        self._say_skipped(errors)
        self._say_unknown_states(job.state for job in jobs)
        return QueryResult(merge_jobs(jobs), version, errors, unparsed)

    def _say_skipped(self, errors: Iterable[object]) -> None:
        for err in errors:
            text = str(err)
            gate = self._said_record if _NAMES_A_JOB.search(text) else self._said
            if gate.allow(text):
                log.error("skipped: %s", text)

    def _say_unknown_states(self, states: Iterable[str]) -> None:
        """Once per state and collector: a job state this ccadapter does not know."""
        for state in {base_state(s) for s in states if not known_state(s)}:
            if state in self._unknown_states:
                continue
            self._unknown_states.add(state)
            log.warning("Slurm %s: job state %s is unknown to this ccadapter: a run in it "
                        "counts as running until slurmdbd gives it an end time, then it is "
                        "stopped as %s", self._known_version or "", state, UNKNOWN_ENDED)

    def _seen(self, version: SlurmVersion) -> None:
        """An answer named its release: kept for messages, said once if newer than
        verified."""
        self._known_version = str(version)
        self._sacct_has_scripts = format_for(version, "sacct --json").SACCT_HAS_SCRIPTS
        self._say_if_newer(version)

    def _say_if_newer(self, version: SlurmVersion) -> None:
        """Once per collector: the release is newer than the newest verified one."""
        if self._warned_newer or not newer_than_verified(version):
            return
        self._warned_newer = True
        log.warning("Slurm %s is newer than the newest release this ccadapter verified (%s): "
                    "its answers are read as %s's and every record is checked; a record that "
                    "does not fit is reported with the command and asked again until it does. "
                    "Upgrade ccadapter to one that verified Slurm %d.%02d", version,
                    SUPPORTED[-1], SUPPORTED[-1], version.major, version.minor)

    # --- slurmctld --------------------------------------------------------------------------

    def controller_jobs(self, job_ids: Iterable[int], cluster: str | None = None,
                        scripts_for: Collection[int] = (), beside: Executor | None = None
                        ) -> tuple[list[Job], list[int]]:
        """Jobs as slurmctld holds them (:meth:`Slurmctld.jobs`)."""
        return self.slurmctld.jobs(job_ids, cluster, scripts_for, beside)

    def stored_scripts(self, job_ids: Sequence[int]) -> dict[int, str]:
        """The batch scripts slurmdbd stored of these jobs, asked of slurmdbd instead of
        slurmctld (one ``sacct --json -B`` for them all; a ``write batch_script`` is a
        slurmctld RPC per job): where its release puts them in the JSON (23.02 on) and
        ``AccountingStoreFlags`` holds ``job_script``. None found, slurmdbd unreachable, or
        its release not known yet (no sacct answered yet): {} (slurmctld is asked)."""
        if not job_ids or not self._sacct_has_scripts or not stores_scripts(self.config_text):
            return {}
        try:
            read = self._reader.read(sorted(set(job_ids)), True, clusters_arg(self.cluster))
        except CcAdapterError as exc:
            log.debug("batch scripts not read from slurmdbd (%s): asked of slurmctld", exc)
            return {}
        return {r.job_id: r.script for r in read.records if r.script}

    @property
    def costs(self) -> RouteCosts:
        return self.slurmctld.costs


def _merged(results: Iterable[QueryResult]) -> QueryResult:
    out = QueryResult([], None)
    for result in results:
        out.jobs += result.jobs
        out.errors += result.errors
        out.unparsed += result.unparsed
        out.version = out.version or result.version
    return out


def _known_runs(records: Sequence[SacctRecord], known: KnownRuns | None
                ) -> set[tuple[int, int]]:
    started = [(r.job_id, r.start_time) for r in records if r.start_time and r.nodes]
    return known(started) if known and started else set()
