"""Hook messages to the fast path of their cluster.

Each served cluster has a fast path of its own (its collector asks that cluster's slurmctld,
``scontrol --clusters NAME``), so a burst or a hung slurmctld of one cluster never delays
another's. The router is what :class:`~ccadapter.prep.server.PrepServer` hands valid
messages to; a message of a cluster this daemon does not serve is refused as a
:class:`BadMessage` (logged and counted as ``invalid`` by the server), as cc-slurm-adapter
drops a ``SLURM_CLUSTER_NAME`` it does not manage (``jobEventsProcess`` in its
``cmd/cc-slurm-adapter/daemon.go``). Clusters come and go while it runs
(``slurmClusters: ["*"]``).
"""

from __future__ import annotations

import threading
from typing import Protocol

from ccadapter.prep.messages import BadMessage, HookMessage


class ClusterFastPath(Protocol):
    """What the router needs of a cluster's fast path (:class:`~.fastpath.FastPath`)."""

    def start(self) -> object: ...
    def stop(self) -> None: ...
    def submit(self, msg: HookMessage) -> None: ...


class HookRouter:
    def __init__(self) -> None:
        self._paths: dict[str, ClusterFastPath] = {}
        self._lock = threading.Lock()
        self._started = False

    def add(self, cluster: str, fast: ClusterFastPath) -> None:
        """Route ``cluster``'s messages to ``fast`` (started here if the router runs)."""
        with self._lock:
            old = self._paths.pop(cluster, None)
            self._paths[cluster] = fast
            if self._started:
                fast.start()
        if old is not None and self._started:
            old.stop()

    def remove(self, cluster: str) -> None:
        """Refuse ``cluster``'s messages from now on; its fast path finishes and stops."""
        with self._lock:
            fast = self._paths.pop(cluster, None)
        if fast is not None and self._started:
            fast.stop()

    def clusters(self) -> list[str]:
        with self._lock:
            return list(self._paths)

    def start(self) -> HookRouter:
        with self._lock:
            self._started = True
            paths = list(self._paths.values())
        for fast in paths:
            fast.start()
        return self

    def stop(self) -> None:
        with self._lock:
            paths = list(self._paths.values())
        for fast in paths:
            fast.stop()

    def submit(self, msg: HookMessage) -> None:
        with self._lock:
            fast = self._paths.get(msg.cluster)
            served = list(self._paths)
        if fast is None:
            ours = ", ".join(repr(c) for c in served) or "none yet"
            raise BadMessage(f"cluster {msg.cluster[:40]!r} is not ours ({ours})")
        fast.submit(msg)
