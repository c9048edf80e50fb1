"""Join what slurmdbd and slurmctld know of one run into a :class:`~ccadapter.model.Job`.

Pure functions, kept apart from the collector (which decides what to ask Slurm) so that the
joining rules are tested on recorded outputs alone: slurmdbd's record gives the run's identity,
times and counts; slurmctld's ``scontrol show job -d`` adds the exact CPU ids and GPU indices
while it still holds the job; ``gpuPciAddrs`` turns GPU indices into PCI addresses. A
component of a heterogeneous job becomes a Job of its own here, naming its component; the
collector merges the components into one (:mod:`ccadapter.slurm.hetjob`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from datetime import tzinfo

from ccadapter.model import HetComponent, Job, JobState, Resource, Shared, base_state, cc_state
from ccadapter.slurm.formats.records import ControllerJob, SacctRecord
from ccadapter.slurm.timefmt import readings

log = logging.getLogger(__name__)

GpuPatterns = list[tuple[re.Pattern[str], list[str]]]


def placeholder_record(rec: SacctRecord) -> bool:
    """Is this slurmdbd's stand-in record of a job whose step start reached it before the
    job's own start record? Then it has no partition, is named ``allocation`` and has no time
    limit, until the job's record arrives (seen on 22.05 within a second of a job's start;
    found by the fault matrix). Every job Slurm starts runs in a partition."""
    return bool(rec.start_time) and not rec.partition


def _allocation_changed(rec: SacctRecord, ctl: ControllerJob) -> bool:
    """A job resized since it started holds another allocation in slurmctld than slurmdbd's
    record of its start names (a resize folded into the run, :mod:`ccadapter.slurm.resize`,
    or one between the two reads: seen on 22.05 within a poll of the resize). The run keeps
    its first allocation, the one the hook sends at its start; by hostname only when its
    start is sent later."""
    return bool(rec.nodes) and {n.hostname for n in ctl.nodes} != set(rec.nodes)


def build_job(rec: SacctRecord, ctl: ControllerJob | None, script: str,
              gpu_patterns: GpuPatterns) -> Job:
    """Join what slurmdbd and slurmctld know of one run. Pure. Where slurmdbd holds only a
    :func:`placeholder_record`, the job's name, partition, account and time limit are
    slurmctld's (cc-backend keeps a start as it was first sent)."""
    if ctl is not None and placeholder_record(rec) and ctl.partition:
        rec = dataclasses.replace(rec, name=ctl.name, partition=ctl.partition,
                                  account=ctl.account or rec.account,
                                  time_limit=ctl.time_limit)
    if ctl is not None and ctl.nodes and not _allocation_changed(rec, ctl):
        resources = tuple(
            Resource(n.hostname, n.cpu_ids, _accelerators(n.hostname, n.gpu_indices, gpu_patterns))
            for n in ctl.nodes
        )
    else:
        resources = tuple(Resource(h) for h in rec.nodes) if rec.start_time else ()
    gpus = sum(len(n.gpu_indices) for n in ctl.nodes) if ctl else 0
    shared = rec.shared or (ctl.shared if ctl else Shared.MULTI_USER)
    state = rec.state.upper()
    if ctl is not None and rec.end_time == 0 and base_state(ctl.state) == "CONFIGURING":
        state = "CONFIGURING"  # slurmdbd says running; its start is not final (model.py)
    return Job(
        job_id=rec.job_id,
        cluster=rec.cluster,
        partition=rec.partition,
        account=rec.account,
        user=rec.user,
        group=rec.group,
        name=rec.name,
        state=state,
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
        het_components=_component(rec.job_id, rec.het_job_id, rec.het_offset)
        or (_component(ctl.job_id, ctl.het_job_id, ctl.het_offset) if ctl else ()),
        energy=rec.energy,
    )


def controller_job(ctl: ControllerJob, cluster: str, tz: tzinfo,
                   gpu_patterns: GpuPatterns) -> Job | None:
    """A Job from slurmctld's view alone; None when a time is not exactly known. Pure."""
    times = []
    for text in (ctl.submit_time, ctl.start_time, ctl.end_time):
        found = readings(text, tz)
        if len(found) > 1:
            return None  # the repeated hour of a clock change: let sacct decide
        times.append(found[0] if found else 0)
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
        het_components=_component(ctl.job_id, ctl.het_job_id, ctl.het_offset),
        restarts=ctl.restarts,
        gave_its_nodes=ctl.resized and not ctl.nodes and not running,
    )


def _component(job_id: int, het_job_id: int, offset: int | None) -> tuple[HetComponent, ...]:
    """The het job component a record stands for (merged later: ccadapter.slurm.hetjob)."""
    return (HetComponent(het_job_id, offset, job_id),) if het_job_id and offset is not None \
        else ()


def _accelerators(host: str, indices: tuple[int, ...], patterns: GpuPatterns
                  ) -> tuple[str, ...]:
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
