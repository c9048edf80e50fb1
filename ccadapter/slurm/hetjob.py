"""Heterogeneous jobs: one cc-backend job per het job, built from its components. Pure.

Slurm runs a het job (``sbatch -n1 : -n2 script``) as one job per component, each with a job
id of its own: job 11 is ``11+0``, the leader, whose id names the het job; job 12 is
``11+1``. Asked for the leader's id, sacct and scontrol answer with every component. The
components start together (in one pass of the backfill scheduler, which alone starts het
jobs) and each ends on its own: ``scancel 11+1`` ends component 1 while the leader goes on;
the batch script's end, or ``scancel 11``, ends them all. cc-backend gets one job, built by
the same rules from the run listing (:func:`merge_stamps`) and from the runs read in detail
(:func:`merge_jobs`), on every path (the poll, the Prolog/Epilog fast path, stale-jobs,
cc-cache, backfill, ``ccadapter jobs``):

- jobId and startTime are the leader's: cc-backend knows the job by them, and the outbox
  keys its events by them, so no component ever has events of its own;
- a component's run belongs to the leader's run that started within :data:`SLACK` seconds
  of it (a requeued het job starts all its components again, later);
- it runs while any component runs; it ends when the last component ends (its stopTime);
  it is CONFIGURING (not started: ``ccadapter.model.PENDING_STATES``) while any running
  component is (on the fast path, only a component whose nodes may boot stays CONFIGURING:
  :mod:`ccadapter.slurm.nodeboot`);
- state: the leader's, unless the leader completed and another component did not (it was
  cancelled, failed, ran out of memory, ...): then that component's, the first by offset.
  "Completed" means every part completed;
- resources: every component's hosts, in component order; a host two components use
  appears once, with the union of their hwthreads and accelerators (cc-backend requires
  ``len(resources) == numNodes``); numNodes counts distinct hosts, numHwthreads and numAcc
  are the components' sums;
- shared: the most shared component's (a het job is exclusive only where every part is);
  walltime: the longest limit, none when a component has none; partition: the components'
  distinct partitions in order, comma-separated, as Slurm writes a job that may run in
  several (``gpu,debug``);
- energy: the sum of what Slurm accounted to the components; none when it accounted none
  (a component whose nodes ran no step, such as the others of ``sbatch --wrap``, has none);
- name, user, account, group, submit time, exit code and batch script are the leader's;
  slurmInfo holds every component's ``scontrol show job`` record, leader first;
- ``het_components`` (metaData ``hetJobComponents``: ``11+0=11,11+1=12``) names them all.

A component read without its leader is left out of :func:`merge_jobs`: the leader is always
asked for (by listing stamps under its id), and its answer carries every component.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from ccadapter.model import HetComponent, Job, JobState, Resource, Shared, base_state, cc_state
from ccadapter.slurm.formats.listing import RunStamp

# Seconds between the starts of one run's components: the backfill scheduler starts them
# one after the other in one pass (the same second on the test bed); the runs of a requeued
# het job are a scheduling cycle apart at least.
SLACK = 10

# From the least to the most shared: a het job is as shared as its most shared part.
_SHARING = (Shared.NONE, Shared.SINGLE_USER, Shared.MULTI_USER)

Part = TypeVar("Part", RunStamp, Job)


def merge_stamps(stamps: Iterable[RunStamp]) -> list[RunStamp]:
    """The listing with each het job's runs as one stamp under the leader's id, in the
    place of its first component; other stamps unchanged. Components listed without their
    leader still make one stamp (with their own start): reading it in detail asks for the
    leader, whose answer is whole."""
    out: list[RunStamp] = []
    for item in _by_het_job(stamps, lambda s: s.het):
        if isinstance(item, RunStamp):
            out.append(item)
        else:
            out += (_merged_stamp(run) for run in _runs(item, lambda s: s.start_time))
    return out


def merge_jobs(jobs: Iterable[Job]) -> list[Job]:
    """The jobs with each het job's components merged into one Job per run, in the place
    of its first component; other jobs unchanged. Components without their leader's run
    are left out (see the module docstring)."""
    out: list[Job] = []
    for item in _by_het_job(jobs, _component):
        if isinstance(item, Job):
            out.append(item)
        else:
            out += (_merged_job(run) for run in _runs(item, lambda j: j.start_time)
                    if run[0][0].offset == 0)
    return out


def het_state(parts: Sequence[tuple[str, bool]]) -> str:
    """The het job's Slurm state from its components' (state, finished), leader first."""
    unfinished = [state for state, finished in parts if not finished]
    if unfinished:  # a part still runs: so does the het job; configuring while any part is
        return next((s for s in unfinished if base_state(s) == "CONFIGURING"), unfinished[0])
    leader = parts[0][0]
    if cc_state(leader) is not JobState.COMPLETED:
        return leader
    return next((s for s, _ in parts[1:] if cc_state(s) is not JobState.COMPLETED), leader)


# --- grouping --------------------------------------------------------------------------------


def _component(job: Job) -> HetComponent | None:
    """The component a Job read from Slurm stands for (one entry before the merge)."""
    return next((c for c in job.het_components if c.job_id == job.job_id), None)


def _by_het_job(parts: Iterable[Part], het: Callable[[Part], HetComponent | None]
                ) -> list[Part | list[tuple[HetComponent, Part]]]:
    """Each part that is no component as it is, and each het job's components (with what
    they are) as one list where its first component was."""
    out: list[Part | list[tuple[HetComponent, Part]]] = []
    groups: dict[int, list[tuple[HetComponent, Part]]] = {}
    for part in parts:
        comp = het(part)
        if comp is None:
            out.append(part)
        elif comp.het_job_id in groups:
            groups[comp.het_job_id].append((comp, part))
        else:
            groups[comp.het_job_id] = [(comp, part)]
            out.append(groups[comp.het_job_id])
    return out


def _runs(parts: list[tuple[HetComponent, Part]], start: Callable[[Part], int]
          ) -> list[list[tuple[HetComponent, Part]]]:
    """One het job's parts grouped by run, each run by offset: every run of the leader, with
    the components that started within SLACK seconds of it (the nearest such run); the
    components without one grouped among themselves the same way. A part seen twice (the
    same component and start) counts once."""
    unique = {(comp.job_id, start(part)): (comp, part) for comp, part in parts}
    runs: list[list[tuple[HetComponent, Part]]] = []
    for comp, part in sorted(unique.values(), key=lambda cp: (cp[0].offset, start(cp[1]))):
        near = [run for run in runs if abs(start(run[0][1]) - start(part)) <= SLACK
                and all(c.offset != comp.offset for c, _ in run)]
        if near:
            min(near, key=lambda run: abs(start(run[0][1]) - start(part))).append((comp, part))
        else:
            runs.append([(comp, part)])
    return runs


# --- merging ---------------------------------------------------------------------------------


def _merged_stamp(parts: list[tuple[HetComponent, RunStamp]]) -> RunStamp:
    run = [stamp for _, stamp in parts]
    ended = all(s.finished for s in run)
    return RunStamp(
        job_id=parts[0][0].het_job_id,
        start_time=run[0].start_time,
        end_time=max(s.end_time for s in run) if ended else 0,
        state=het_state([(s.state, s.finished) for s in run]),
        nodes=",".join(s.nodes for s in run if s.nodes),
    )


def _merged_job(parts: list[tuple[HetComponent, Job]]) -> Job:
    run = [job for _, job in parts]
    lead = run[0]
    ended = all(j.finished for j in run)
    resources = _union(r for j in run for r in j.resources)
    limits = [j.time_limit for j in run]
    return replace(
        lead,
        partition=",".join(dict.fromkeys(j.partition for j in run if j.partition)),
        state=het_state([(j.state, j.finished) for j in run]),
        end_time=max(j.end_time for j in run) if ended else 0,
        time_limit=0 if 0 in limits else max(limits),
        num_nodes=len(resources) if resources else sum(j.num_nodes for j in run),
        num_hwthreads=sum(j.num_hwthreads for j in run),
        num_acc=sum(j.num_acc for j in run),
        shared=max((j.shared for j in run), key=_SHARING.index),
        resources=resources,
        slurm_info="\n\n".join(j.slurm_info for j in run if j.slurm_info),
        allocation_known=all(j.allocation_known for j in run),
        het_components=tuple(sorted(c for j in run for c in j.het_components)),
        energy=sum(known) if (known := [j.energy for j in run if j.energy is not None]) else None,
    )


def _union(resources: Iterable[Resource]) -> tuple[Resource, ...]:
    """One Resource per host, in the order hosts first appear: a host used by several
    components gets the union of their hwthreads (sorted) and accelerators (in order)."""
    hosts: dict[str, tuple[set[int], dict[str, None]]] = {}
    for res in resources:
        threads, accs = hosts.setdefault(res.hostname, (set(), {}))
        threads.update(res.hwthreads)
        accs.update(dict.fromkeys(res.accelerators))
    return tuple(Resource(host, tuple(sorted(threads)), tuple(accs))
                 for host, (threads, accs) in hosts.items())
