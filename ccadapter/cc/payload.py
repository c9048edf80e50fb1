"""Job -> cc-backend request bodies. Pure; tested against bodies written out in full
(tests/unit/test_payload.py).

cc-backend decodes bodies strictly (an unknown field is a 400), so only fields of its
``schema.Job`` appear, and only when they carry information: ``walltime`` is omitted for
jobs without a limit (cc-backend requires >= 1 when present), empty ``hwthreads`` and
``accelerators`` lists are left out. ``metaData`` values are strings, as the schema says.

A heterogeneous job is one job (:mod:`ccadapter.slurm.hetjob`); its metaData names the
components as ``hetJobComponents``: ``"11+0=11,11+1=12"`` (Slurm's ``LEADER+OFFSET`` name,
``=``, the component's own job id, in offset order). A component on its own is never a body.

The consumed energy cannot ride on the stop: ``StopJobAPIRequest`` has no metaData (an
unknown field is a 400, cc-backend v1.5.4 internal/api/job.go), and the start is sent
before anyone knows it. It goes into the stopped job's metaData by ``PATCH
/api/jobs/edit_meta/`` (:func:`energy_meta_body`).
"""

from __future__ import annotations

from typing import Any

from ccadapter.model import Job, JobState, Resource


class NotSendable(ValueError):
    """This run cannot become a start_job body (it never started, lacks a user, or is a
    component of a het job, which is sent as part of its leader's job)."""


def start_job_body(job: Job) -> dict[str, Any]:
    """The exact body of ``POST /api/jobs/start_job/`` for this run."""
    _not_a_component(job)
    if not job.started:
        raise NotSendable(f"job {job.job_id} never started (Slurm state {job.state})")
    if not job.user:
        raise NotSendable(f"job {job.job_id} has no user")
    body: dict[str, Any] = {
        "jobId": job.job_id,
        "arrayJobId": job.array_job_id,
        "user": job.user,
        "project": job.account,
        "cluster": job.cluster,
        "partition": job.partition,
        "numNodes": len(job.resources),
        "numHwthreads": job.num_hwthreads,
        "numAcc": job.num_acc,
        "shared": job.shared.value,
        "jobState": JobState.RUNNING.value,
        "startTime": job.start_time,
        "submitTime": job.submit_time,
        "resources": [_resource(r) for r in job.resources],
        "metaData": _meta(job),
    }
    if job.time_limit > 0:
        body["walltime"] = job.time_limit
    return body


def stop_job_body(job: Job) -> dict[str, Any]:
    """The body of ``POST /api/jobs/stop_job/``; always with startTime, so that cc-backend
    stops this run and not the newest one of that job id."""
    _not_a_component(job)
    if not job.started:
        raise NotSendable(f"job {job.job_id} never started (Slurm state {job.state})")
    state = job.cc_state
    if not job.finished or state is None or state is JobState.RUNNING:
        raise NotSendable(f"job {job.job_id} has not ended (Slurm state {job.state})")
    return {
        "jobId": job.job_id,
        "cluster": job.cluster,
        "startTime": job.start_time,
        "stopTime": max(job.end_time, job.start_time),
        "jobState": state.value,
    }


def _not_a_component(job: Job) -> None:
    if job.het_part:
        raise NotSendable(f"job {job.job_id} is a component of het job "
                          f"{job.het_components[0].het_job_id}, sent as part of it")


def _resource(res: Resource) -> dict[str, Any]:
    out: dict[str, Any] = {"hostname": res.hostname}
    if res.hwthreads:
        out["hwthreads"] = list(res.hwthreads)
    if res.accelerators:
        out["accelerators"] = list(res.accelerators)
    return out


def _meta(job: Job) -> dict[str, str]:
    meta = {"jobName": job.name, "submitTime": str(job.submit_time)}
    if job.array_task_id is not None:
        meta["arrayTaskId"] = str(job.array_task_id)
    if job.slurm_info:
        meta["slurmInfo"] = job.slurm_info
    if job.job_script:
        meta["jobScript"] = job.job_script
    if job.het_components:
        meta["hetJobComponents"] = ",".join(f"{c}={c.job_id}" for c in job.het_components)
    return meta


ENERGY_KEY = "energy"  # the metaData key of the consumed energy


def energy_meta_body(job: Job) -> dict[str, Any] | None:
    """The body of ``PATCH /api/jobs/edit_meta/`` that sets ``metaData.energy`` of this
    stopped run to the joules Slurm accounted, as a decimal string (metaData values are
    strings). cc-backend's ``JobMetaRequest`` (v1.5.4 internal/api/job.go) finds the run by
    jobId, cluster and startTime and sets one key (``editMetaByRequest``). None when the run
    has not ended or Slurm accounted no energy for it.

    Not cc-backend's own ``energy`` field: that one is computed from the metric data when
    the job is archived, in kWh, and overwrites whatever was sent (repository/job.go
    ``UpdateEnergy``).
    """
    if job.energy is None or not job.started or not job.finished:
        return None
    return {"jobId": job.job_id, "cluster": job.cluster, "startTime": job.start_time,
            "payload": {"key": ENERGY_KEY, "value": str(job.energy)}}
