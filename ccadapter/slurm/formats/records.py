"""The shapes every Slurm generation's parsers produce, and the context that makes each
parse error name the Slurm version and the command."""

from __future__ import annotations

from dataclasses import dataclass

from ccadapter.errors import SlurmParseError
from ccadapter.model import Ownership, Shared


@dataclass(frozen=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def generation(self) -> tuple[int, int]:
        return (self.major, self.minor)


@dataclass(frozen=True)
class SacctRecord(Ownership):
    """What slurmdbd knows of one run, before allocation details are added."""

    job_id: int
    array_job_id: int
    array_task_id: int | None
    state: str
    submit_time: int
    start_time: int
    end_time: int
    time_limit: int  # seconds, 0 = unlimited
    nodes: tuple[str, ...]
    num_nodes: int
    num_hwthreads: int
    num_gpus: int | None  # None when slurmdbd does not track gres/gpu
    shared: Shared | None  # None when this generation's sacct does not say
    script: str | None  # None when slurmdbd did not store it
    exit_code: int | None
    het_job_id: int = 0  # the leader's id for a component of a het job, else 0
    het_offset: int | None = None  # the component's offset in its het job
    energy: int | None = None  # joules consumed; None when Slurm accounted none
    resized: bool = False  # folded from the records of a resize (ccadapter.slurm.resize)


@dataclass(frozen=True)
class NodeAlloc:
    hostname: str
    cpu_ids: tuple[int, ...]
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True)
class ControllerJob:
    """What slurmctld knows of a job it still holds (until MinJobAge after its end)."""

    job_id: int
    state: str
    start_time: str  # local time text as scontrol prints it, "Unknown"/"None" when unset
    batch: bool
    shared: Shared
    nodes: tuple[NodeAlloc, ...]
    text: str
    # The rest serves the Prolog/Epilog fast path, which builds jobs without slurmdbd.
    name: str = ""
    user: str = ""
    group: str = ""
    account: str = ""
    partition: str = ""
    submit_time: str = ""
    end_time: str = ""
    time_limit: int = 0  # seconds, 0 = unlimited
    num_cpus: int = 0
    array_job_id: int = 0
    array_task_id: int | None = None
    exit_code: int | None = None
    gpus: int | None = None  # gres/gpu in the allocated TRES
    het_job_id: int = 0  # HetJobId= of a het job's component, else 0
    het_offset: int | None = None  # HetJobOffset=
    reboot: bool = False  # Reboot=1: its nodes are rebooted for it (sbatch --reboot)
    restarts: int = 0  # Restarts=: how often slurmctld requeued it
    resized: bool = False  # ResizeTime= set: its allocation changed while it ran


@dataclass(frozen=True)
class ParseContext:
    """Carried into parsers so every error names the Slurm version and command."""

    version: str
    command: str
    job_id: int | None = None

    def error(self, detail: str) -> SlurmParseError:
        where = f"job {self.job_id}: " if self.job_id is not None else ""
        return SlurmParseError(self.version, self.command, where + detail, self.job_id)

    def for_job(self, job_id: int) -> ParseContext:
        return ParseContext(self.version, self.command, job_id)


@dataclass(frozen=True)
class NodeState:
    hostname: str
    states: tuple[str, ...]
    cpus_allocated: int
    memory_allocated: int  # MB
    gpus_allocated: int
    # the node's layout as slurmctld holds it (slurm.conf's, with config_overrides), which
    # Slurm's abstract CPU ids count in (ccadapter.numbering); 0 where a line lacks it
    sockets: int = 0
    cores_per_socket: int = 0
    threads_per_core: int = 0
    cpus: int = 0  # CPUTot
