"""One node's allocation from Slurm's numbering into cc-backend's. Pure.

Slurm's abstract CPU id ``i`` on a node of ``S`` sockets, ``C`` cores per socket and ``T``
threads per core (``scontrol show node``: ``Sockets``, ``CoresPerSocket``,
``ThreadsPerCore``) is thread ``i % T`` of core ``(i // T) % C`` of socket ``i // (C * T)``;
:class:`~ccadapter.numbering.topology.SubclusterNumbering` lists the OS ids in that order,
so the mapping is an index, valid only where the node's Slurm layout is the subcluster's.
GRES index ``i`` is the ``i``-th accelerator of the subcluster's topology (Slurm orders a
node's GPUs as gres.conf lists them, by PCI bus id when detected). An accelerator named
otherwise than by a number (``gpuPciAddrs`` gave its PCI address) is kept as it is.

Where the mapping cannot be trusted, :class:`Unmappable` says why and what kind of reason
(a bounded set: the daemon counts them by it); the caller then sends Slurm's numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ccadapter.numbering.topology import SubclusterNumbering


class Reason(StrEnum):
    """Why a node's resources were sent in Slurm's numbering."""

    NO_TOPOLOGY = "no-topology"  # cc-backend has no (usable) topology for the node
    NO_LAYOUT = "no-layout"  # Slurm did not say the node's sockets, cores and threads
    LAYOUT_DIFFERS = "layout-differs"  # Slurm's layout is not the subcluster's
    GPU_INDEX = "gpu-index"  # a GRES index past the topology's accelerators


@dataclass(frozen=True)
class SlurmLayout:
    """A node as ``scontrol show node`` describes it. ``cpus``: its ``CPUTot``; where it is
    ``sockets * cores_per_socket`` on an SMT node, Slurm counts cores as its CPUs and the
    abstract ids are core indices."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cpus: int = 0

    def __str__(self) -> str:
        return f"{self.sockets}x{self.cores_per_socket}x{self.threads_per_core}"


class Unmappable(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def os_hwthreads(ids: Sequence[int], layout: SlurmLayout | None,
                 sub: SubclusterNumbering | None) -> tuple[int, ...]:
    """The OS ids of Slurm's abstract CPU ids ``ids`` on a node of ``layout`` in ``sub``."""
    if sub is None or sub.problem:
        raise Unmappable(Reason.NO_TOPOLOGY, sub.problem if sub else "cc-backend's cluster "
                         "configuration lists the node in no subcluster")
    if layout is None:
        raise Unmappable(Reason.NO_LAYOUT, "slurmctld did not say the node's layout")
    theirs = f"{sub.sockets}x{sub.cores_per_socket}x{sub.threads_per_core}"
    if (layout.sockets, layout.cores_per_socket, layout.threads_per_core) != \
            (sub.sockets, sub.cores_per_socket, sub.threads_per_core):
        raise Unmappable(Reason.LAYOUT_DIFFERS, f"Slurm's layout {layout} (sockets x cores x "
                         f"threads) is not the topology's {theirs}")
    per_cpu = 1
    if layout.threads_per_core > 1 and layout.cpus == layout.sockets * layout.cores_per_socket:
        per_cpu = layout.threads_per_core  # each of Slurm's CPUs is a whole core
    out: set[int] = set()
    for i in ids:
        first = i * per_cpu
        if i < 0 or first + per_cpu > len(sub.cpus):
            raise Unmappable(Reason.LAYOUT_DIFFERS, f"CPU id {i} is past the topology's "
                             f"{len(sub.cpus)} processors")
        out.update(sub.cpus[first:first + per_cpu])
    return tuple(sorted(out))


def os_accelerators(names: Sequence[str], sub: SubclusterNumbering | None
                    ) -> tuple[str, ...]:
    """The topology's ids of the GRES indices among ``names``; other names are kept."""
    if all(not n.isdigit() for n in names):
        return tuple(names)
    if sub is None:
        raise Unmappable(Reason.NO_TOPOLOGY, "cc-backend's cluster configuration lists the "
                         "node in no subcluster")
    out = []
    for name in names:
        if not name.isdigit():
            out.append(name)
            continue
        index = int(name)
        if index >= len(sub.accelerators):
            raise Unmappable(Reason.GPU_INDEX, f"GPU index {index} is past the "
                             f"{len(sub.accelerators)} accelerators of its topology")
        out.append(sub.accelerators[index])
    return tuple(out)
