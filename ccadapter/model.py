"""The normalized job, independent of the Slurm version it was read from.

Everything downstream (payloads, the outbox, the reconcilers) sees only these frozen
dataclasses; what differs between Slurm releases stays in ``ccadapter.slurm.formats``.
The words every layer shares live here too: :class:`EventKind` (what an outbox event asks
of cc-backend) and the rule for cluster names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class JobState(StrEnum):
    """cc-backend's ``jobState`` values."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    NODE_FAIL = "node_fail"
    OUT_OF_MEMORY = "out_of_memory"
    BOOT_FAIL = "boot_fail"
    DEADLINE = "deadline"


# Slurm base states (without flags such as "CANCELLED by 0") -> cc-backend state.
# COMPLETING, SUSPENDED, STOPPED and friends are still on the nodes: running for cc-backend.
_SLURM_TO_CC: dict[str, JobState] = {
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAIL,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "BOOT_FAIL": JobState.BOOT_FAIL,
    "DEADLINE": JobState.DEADLINE,
    # A requeued run ended; the next run is a new start with its own startTime.
    "REQUEUED": JobState.PREEMPTED,
    "REQUEUE_FED": JobState.PREEMPTED,
    "REQUEUE_HOLD": JobState.PREEMPTED,
    "SPECIAL_EXIT": JobState.FAILED,
    "REVOKED": JobState.CANCELLED,
}

# States in which a job has not (yet) run. CONFIGURING: its nodes are allocated but still
# booting (power saving, --reboot) or its PrologSlurmctld still runs; when nodes power up,
# slurmctld resets the job's StartTime once they are up and sends the new one to slurmdbd
# (``job_config_fini`` in job_mgr.c: "Resetting %pJ start time for node power up", from 22.05
# to 26.05): a start sent before would carry a startTime
# that is not the run's, and cc-backend would get two jobs. Where slurmctld boots no nodes
# for a job, its StartTime is final while CONFIGURING, and the fast path sends its start
# (ccadapter.slurm.nodeboot); the poll waits until it runs.
PENDING_STATES = frozenset({"PENDING", "REQUEUE_HOLD", "REVOKED", "CONFIGURING"})


def base_state(slurm_state: str) -> str:
    """``"CANCELLED by 0"`` -> ``"CANCELLED"``; Slurm appends reasons and flags."""
    return slurm_state.strip().split(" ", 1)[0].upper()


def cc_state(slurm_state: str) -> JobState | None:
    """cc-backend's state for a Slurm state, None where cc-backend has none (PENDING) and
    for a state we do not know (:func:`known_state`)."""
    return _SLURM_TO_CC.get(base_state(slurm_state))


def known_state(slurm_state: str) -> bool:
    """A Slurm state this module maps; a newer Slurm may add others."""
    base = base_state(slurm_state)
    return base in _SLURM_TO_CC or base in PENDING_STATES


# What a run that ended in a state we do not know is sent as: cc-backend's states are fixed,
# and a state Slurm added is most likely a way to fail (as BOOT_FAIL, DEADLINE, OUT_OF_MEMORY
# were); sent as failed, the run is at least stopped.
UNKNOWN_ENDED = JobState.FAILED


def ended(slurm_state: str, end_time: int) -> bool:
    """Whether slurmdbd's run has ended: an end time and a state that is not running. A
    state we do not know counts as ended when slurmdbd gave the run an end time (slurmdbd
    leaves it unset while a job runs), so that a newer Slurm's new end state never keeps a
    run open in cc-backend."""
    if end_time <= 0:
        return False
    state = cc_state(slurm_state)
    if state is None:
        return not known_state(slurm_state)
    return state is not JobState.RUNNING


class Shared(StrEnum):
    """cc-backend's ``shared``: how the job's nodes may be shared."""

    NONE = "none"
    SINGLE_USER = "single_user"
    MULTI_USER = "multi_user"


@dataclass(frozen=True)
class Resource:
    """One node of an allocation."""

    hostname: str
    hwthreads: tuple[int, ...] = ()
    accelerators: tuple[str, ...] = ()


@dataclass(frozen=True, order=True)
class HetComponent:
    """One component of a heterogeneous job: Slurm's ``LEADER+OFFSET`` name for it, and the
    job id Slurm gave it. The leader (offset 0) has the het job's own id."""

    het_job_id: int
    offset: int
    job_id: int

    def __str__(self) -> str:
        return f"{self.het_job_id}+{self.offset}"


@dataclass(frozen=True, kw_only=True)
class Ownership:
    """Where a run ran and whose it is: slurmdbd's record of the run
    (:class:`~ccadapter.slurm.formats.records.SacctRecord`) and the :class:`Job` built from
    it carry these as they are. Keyword-only, so each class keeps its own positional order."""

    cluster: str
    partition: str
    account: str
    user: str
    group: str
    name: str


@dataclass(frozen=True)
class Job(Ownership):
    """One run of one Slurm job. A requeued job has several runs: same id, other startTime.

    A heterogeneous job is one Job with the leader's id, and ``het_components`` lists the
    components it was built from (:mod:`ccadapter.slurm.hetjob`). The collector reads each
    component as a Job of its own first and merges them before handing them out; a
    component alone (``het_part``) is never sent."""

    job_id: int
    state: str  # Slurm's base state, e.g. "RUNNING", "CANCELLED"
    submit_time: int
    start_time: int  # 0 when it never started
    end_time: int  # 0 while it runs
    time_limit: int  # seconds, 0 = none
    num_nodes: int
    num_hwthreads: int
    num_acc: int
    shared: Shared
    resources: tuple[Resource, ...]
    array_job_id: int = 0
    array_task_id: int | None = None
    exit_code: int | None = None
    slurm_info: str = ""
    job_script: str = ""
    allocation_known: bool = False  # True when hwthreads came from slurmctld
    het_components: tuple[HetComponent, ...] = ()  # by offset; empty: not a het job
    energy: int | None = None  # joules consumed, from slurmdbd; None when not accounted
    # slurmctld's Restarts= (slurmdbd keeps no count): a record of a requeued job whose
    # epilog runs shows the next run's numbers, not the run that ended (prep.fastpath)
    restarts: int = 0
    # slurmctld shows it ended without a node after a resize: it gave them all to the job it
    # expanded (``--dependency=expand:``), and its EndTime is its time limit's, not its end
    gave_its_nodes: bool = False

    @property
    def started(self) -> bool:
        """Did this run ever get nodes? Never-started jobs are never sent to cc-backend."""
        return (
            self.start_time > 0
            and bool(self.resources)
            and base_state(self.state) not in PENDING_STATES
        )

    @property
    def finished(self) -> bool:
        return ended(self.state, self.end_time)

    @property
    def cc_state(self) -> JobState | None:
        """cc-backend's state; a run that ended in a state we do not know is
        :data:`UNKNOWN_ENDED`."""
        state = cc_state(self.state)
        if state is None and self.finished:
            return UNKNOWN_ENDED
        return state

    @property
    def hostnames(self) -> tuple[str, ...]:
        return tuple(r.hostname for r in self.resources)

    @property
    def slurm_ids(self) -> tuple[int, ...]:
        """The Slurm job ids this run covers: every component's of a het job."""
        return tuple(c.job_id for c in self.het_components) or (self.job_id,)

    @property
    def het_part(self) -> bool:
        """A non-leader component of a het job, not merged into the leader's job: never
        sent on its own (its id is not the one cc-backend knows the job by)."""
        return bool(self.het_components) and self.job_id != self.het_components[0].het_job_id

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity of one run: (cluster, jobId, startTime)."""
        return (self.cluster, self.job_id, self.start_time)


class EventKind(StrEnum):
    """What an outbox event asks of cc-backend. One enum for the outbox, the REST and NATS
    deliveries, the metrics' ``kind`` label and ``queue list --kind``; its values are what
    the outbox stores (the ``kind`` column), so a StrEnum: equal to its stored string."""

    START = "start"  # a run began: POST /api/jobs/start_job/
    STOP = "stop"  # a run ended: POST /api/jobs/stop_job/
    NODESTATE = "nodestate"  # the cluster's node states: POST /api/nodestate/
    ENERGY = "energy"  # a stopped run's consumed energy, into its metaData (PATCH)


# Cluster names, where one daemon serves several Slurm clusters (``slurmClusters``).
#
# A name becomes part of a file name (each cluster's lastRun file), of the outbox's state keys
# and of a Slurm command line (``--clusters NAME``), so only names Slurm itself would give a
# cluster are accepted: letters, digits, ``_``, ``.`` and ``-``, starting with a letter or a
# digit (Slurm lower-cases ``ClusterName`` and allows no ``/``). The same rule checks the
# config and what ``sacctmgr list clusters`` answers.
#
# In the default mode (``slurmClusters`` empty: the local cluster only) nothing is scoped: the
# lastRun file, the state keys and the cycle records keep the names they had before several
# clusters were possible, so an installation upgraded in place (or migrated from
# cc-slurm-adapter) continues where it stopped. With ``slurmClusters`` set, every cluster's
# state carries its name: ``CLUSTER/KEY`` in the outbox, ``lastRunPath.CLUSTER`` on disk.

ALL_CLUSTERS = "*"  # slurmClusters: ["*"] -- every cluster `sacctmgr list clusters` names
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid_cluster_name(name: object) -> bool:
    return isinstance(name, str) and bool(_CLUSTER_NAME.match(name))


def scoped_key(key: str, cluster: str | None) -> str:
    """The state key ``key`` of ``cluster``; unchanged in the default mode (``None``)."""
    return key if cluster is None else f"{cluster}/{key}"


def unscoped_key(key: str) -> tuple[str | None, str]:
    """``"c1/slurm-window"`` -> ``("c1", "slurm-window")``; an unscoped key -> ``(None, key)``."""
    cluster, sep, rest = key.partition("/")
    return (cluster, rest) if sep else (None, key)


def last_run_path(base: str | Path, cluster: str | None) -> Path:
    """Where ``cluster``'s lastRun lives: ``lastRunPath`` itself in the default mode, else
    ``lastRunPath.CLUSTER`` beside it."""
    path = Path(base)
    return path if cluster is None else path.with_name(f"{path.name}.{cluster}")
