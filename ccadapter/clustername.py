"""Cluster names, where one daemon serves several Slurm clusters (``slurmClusters``).

A name becomes part of a file name (each cluster's lastRun file), of the outbox's state keys
and of a Slurm command line (``--clusters NAME``), so only names Slurm itself would give a
cluster are accepted: letters, digits, ``_``, ``.`` and ``-``, starting with a letter or a
digit (Slurm lower-cases ``ClusterName`` and allows no ``/``). The same rule checks the
config and what ``sacctmgr list clusters`` answers.

In the default mode (``slurmClusters`` empty: the local cluster only) nothing is scoped: the
lastRun file, the state keys and the cycle records keep the names they had before several
clusters were possible, so an installation upgraded in place (or migrated from
cc-slurm-adapter) continues where it stopped. With ``slurmClusters`` set, every cluster's
state carries its name: ``CLUSTER/KEY`` in the outbox, ``lastRunPath.CLUSTER`` on disk.
"""

from __future__ import annotations

import re
from pathlib import Path

ALL = "*"  # slurmClusters: ["*"] -- every cluster `sacctmgr list clusters` names
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid(name: object) -> bool:
    return isinstance(name, str) and bool(_NAME.match(name))


def scoped(key: str, cluster: str | None) -> str:
    """The state key ``key`` of ``cluster``; unchanged in the default mode (``None``)."""
    return key if cluster is None else f"{cluster}/{key}"


def unscoped(key: str) -> tuple[str | None, str]:
    """``"c1/slurm-window"`` -> ``("c1", "slurm-window")``; an unscoped key -> ``(None, key)``."""
    cluster, sep, rest = key.partition("/")
    return (cluster, rest) if sep else (None, key)


def last_run_path(base: str | Path, cluster: str | None) -> Path:
    """Where ``cluster``'s lastRun lives: ``lastRunPath`` itself in the default mode, else
    ``lastRunPath.CLUSTER`` beside it."""
    path = Path(base)
    return path if cluster is None else path.with_name(f"{path.name}.{cluster}")
