"""The cheap listing of runs: ``sacct -X -n -P -o JobIDRaw,JobID,Start,End,State,NodeList``.

Why a second sacct form beside ``--json``: a poll needs to know *which* runs exist in a window
and whether each has ended, and only then the details of the few that are new to it. The
listing is one short line per run (about 50 bytes against 3-5 KB of JSON), so comparing a
window with what the outbox holds costs little however many runs it holds, and the JSON is
asked for only for the runs that changed.

Times are asked as epochs (``SLURM_TIME_FORMAT=%s``, honoured by sacct since long before
22.05), so no wall-clock text and no daylight-saving ambiguity is involved. The format is the
same on 22.05, 24.11 and 26.05 (the listings in ``tests/fixtures/*/testbed/commands-*.json``);
unset times read ``Unknown`` or ``None``, a run that never got nodes lists ``None assigned``.

``JobID`` is there for heterogeneous jobs only: it names a component ``LEADER+OFFSET``
(``11+1`` for job 12), which ``JobIDRaw`` does not say, so that a listing can be compared
with the outbox by the leader's id (:func:`ccadapter.slurm.hetjob.merge_stamps`). 22.05
prints ``11+1`` from submission on; 24.11 and 26.05 only once the job started (slurmdbd
learns the het job when it starts): a pending component reads ``12``, a job of its own.
Array tasks read ``10_3`` and are left to ``JobIDRaw``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccadapter.errors import SlurmParseError
from ccadapter.model import HetComponent, base_state, ended
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.values import decimal

FIELDS = "JobIDRaw,JobID,Start,End,State,NodeList"
# What each way of asking below costs as the queue grows, and what the ways not taken would:
# BENCHMARKS.md, section "Scale: a long queue of pending jobs".
# Runs that ran during a window: RUNNING matches every run with a start before the window's
# end and an end after its start, or no end and the state RUNNING, whatever it ended as
# (slurmdbd's _state_time_string(), as_mysql_jobacct_process.c, the same on 22.05, 24.11
# and 26.05). MariaDB answers that from the job table's (time_end, time_eligible) index.
# SUSPENDED is not asked: slurmdbd adds it as a subquery of the suspend table per job row
# (OR-ed with the rest, so no index applies), a scan of every job the cluster ever ran, which
# grows with the site's history. A run suspended now and never listed running is listed
# once it resumes or ends (its end is stored then); the hook announces its start anyway.
RAN = ("-s", "RUNNING")
# Runs that ended during a window, whatever they ended as: for these states slurmdbd asks
# ``t1.state=X && t1.time_end between START and END`` (the same function), a range of that
# index that holds only the runs that ended then, whatever the number of queued jobs.
# RUNNING cannot be asked that way: a run that has not ended has time_end 0, as every pending
# job has, so slurmdbd reads every queued job's row to find the running ones. What runs now
# is asked of slurmctld instead (STEP_FIELDS).
#
# Only runs that got nodes (``--nnodes 1-1000000``, a million nodes being more than any
# cluster): a job cancelled while it was queued ends as CANCELLED too, with an end time and
# no nodes. slurmdbd adds ``t1.nodes_alloc between 1 and N`` to the rows the end-time range
# selected, so a user's scancel of 10,000 queued jobs is not listed in every window of the
# next two minutes and in slurm-lookback.
# It lists the same lines as without it, minus ``None assigned``, but for a few seconds after
# a job ends on 22.05: slurmdbd can hold a just-ended job with ``nodes_alloc`` 0 until its
# start record arrives (slurmctld sends it with its database-index pass, every 5 s, when the
# job started before it had an index), while ``sacct -j`` shows it ended. Such a run is
# listed a poll later: the next window starts slurmWindowOverlap before this one's end.
ENDED = ("-s", "BF,CA,CD,DL,F,NF,OOM,PR,RQ,RS,RV,TO", "--nnodes", "1-1000000")
# The jobs that run now, from slurmctld's step list (``squeue -s``): slurmctld packs the steps
# of running jobs only, so the answer and its cost follow the running jobs, where its job
# list (``squeue -t R``) packs every queued job first. JobId is the job's own id (an array
# task's too; StepId is printed to keep the line's shape and for the reader). A job without
# any step is not in it: an allocation (salloc) before its first srun, on a cluster without
# PrologFlags=Contain (with it every job has its extern step from its allocation on); its
# hook announces its start, and the listing of ended runs has it at its end at the latest.
STEP_FIELDS = "JobId:|,StepId:|"
TIME_FORMAT_ENV = {"SLURM_TIME_FORMAT": "%s"}
# What a listing runs with: epoch times out, and its window bounds (``--starttime``, wall-clock
# text: sacct takes no epoch) read in UTC, as the collector writes them. The zone sacct runs
# in is not the daemon's to know (a chroot without /etc/localtime, another host through
# slurmCommandPrefix); a POSIX rule needs no zone file there, and UTC has no repeated hour.
LISTING_ENV = {**TIME_FORMAT_ENV, "TZ": "UTC0"}
_NO_NODES = frozenset({"", "none assigned", "(null)", "none", "(unknown)"})


@dataclass(frozen=True)
class RunStamp:
    """What the listing says of one run: enough to decide whether it needs any work."""

    job_id: int
    start_time: int  # 0: never started
    end_time: int  # 0: has not ended
    state: str  # Slurm's base state, e.g. "RUNNING", "CANCELLED"
    nodes: str  # hostlist expression, "" when it never got nodes
    het: HetComponent | None = None  # a het job's component, as listed

    @property
    def started(self) -> bool:
        return self.start_time > 0 and bool(self.nodes)

    @property
    def finished(self) -> bool:
        return ended(self.state, self.end_time)

    @property
    def run(self) -> tuple[int, int]:
        return (self.job_id, self.start_time)


def parse_listing(out: str, ctx: ParseContext
                  ) -> tuple[list[RunStamp], list[SlurmParseError]]:
    """One RunStamp per line; an unreadable line is an error naming it (and its job, when
    the line names one: ``job_id``), never the end of the listing."""
    stamps: list[RunStamp] = []
    errors: list[SlurmParseError] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        job_id = decimal(parts[0])
        if job_id is None or len(parts) != 6:
            where = ctx if job_id is None else ctx.for_job(job_id)
            errors.append(where.error(f"unreadable listing line {line[:80]!r}"))
            continue
        start, end = (_epoch(p) for p in parts[2:4])
        if start is None or end is None:
            errors.append(ctx.for_job(job_id).error(f"unreadable times in {line[:80]!r}"))
            continue
        nodes = parts[5].strip()
        stamps.append(RunStamp(job_id, start, end, base_state(parts[4]),
                               "" if nodes.lower() in _NO_NODES else nodes,
                               _component(job_id, parts[1])))
    return stamps, errors


def _component(job_id: int, name: str) -> HetComponent | None:
    """``11+1`` -> component 1 of het job 11; any other JobID (``12``, ``10_3``) -> None."""
    leader, plus, offset = name.strip().partition("+")
    het_job_id, number = decimal(leader), decimal(offset)
    if not plus or het_job_id is None or number is None:
        return None
    return HetComponent(het_job_id, number, job_id)


def _epoch(text: str) -> int | None:
    """``1795425711`` -> int; ``Unknown``/``None``/empty -> 0; anything else -> None."""
    text = text.strip()
    if text in ("", "Unknown", "None", "N/A"):
        return 0
    return decimal(text)


def parse_step_jobs(out: str, ctx: ParseContext) -> tuple[set[int], list[str]]:
    """The job ids ``squeue -h -s -O JobId:|,StepId:|`` names. A het job's leader is named
    by its batch step (or its first srun's); a component with a step of its own is named
    by its own id (22.05 has no het field for steps), and listed by id in slurmdbd, which
    answers under the leader's id. With ``-h``, squeue prints no ``CLUSTER:`` header for
    ``--clusters`` (seen on 22.05 with jobs running, on 24.11 and 26.05 idle)."""
    ids: set[int] = set()
    errors: list[str] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        job_id = decimal(line.partition("|")[0])
        if job_id is None:
            errors.append(str(ctx.error(f"unreadable step line {line[:80]!r}")))
            continue
        ids.add(job_id)
    return ids, errors
