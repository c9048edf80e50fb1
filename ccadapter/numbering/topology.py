"""cc-backend's cluster configuration, read as the numbering of each subcluster's nodes.

cc-backend 1.5.4 answers ``GET /api/clusters/`` with ``{"clusters": [cluster, ...]}``, each
cluster as its job archive's ``cluster.json`` holds it (cc-lib ``schema.Cluster``): a
``name`` and ``subClusters``, each with ``nodes`` (a host list, ``a[01-10],b1``),
``socketsPerNode``, ``coresPerSocket``, ``threadsPerCore`` and ``topology``: ``socket``
and ``core`` as lists of OS processor ids, ``accelerators`` as ``{"id", "type", "model"}``.
That numbering is the one its collectors tag samples with and its job pages look up.

:func:`subcluster_numbering` turns one subcluster into the order Slurm counts in: sockets
as the topology lists them, the cores of each socket by their lowest OS id, the threads of
each core by OS id (hwloc's logical order, which Slurm's abstract ids follow). A topology
whose cores do not fit its sockets is kept with the reason, so that the daemon says it.
Pure; nothing here asks cc-backend or reads a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import hostlist


@dataclass(frozen=True)
class SubclusterNumbering:
    """One subcluster as the mapping needs it. ``cpus``: OS ids in Slurm's abstract order
    (abstract id ``i`` is ``cpus[i]``); ``accelerators``: the topology's ids in order (GRES
    index ``i`` is ``accelerators[i]``); ``problem``: why its topology cannot be used, or
    empty."""

    cluster: str
    name: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cpus: tuple[int, ...]
    accelerators: tuple[str, ...] = ()
    problem: str = ""


@dataclass(frozen=True)
class ClusterNumbering:
    """The subclusters of one cluster and which host belongs to which; ``unlisted``: the
    subclusters whose host list could not be read (named in what the daemon says)."""

    name: str
    subclusters: tuple[SubclusterNumbering, ...]
    hosts: Mapping[str, str] = field(default_factory=dict)  # hostname -> subcluster name
    unlisted: tuple[str, ...] = ()

    def of_host(self, hostname: str) -> SubclusterNumbering | None:
        name = self.hosts.get(hostname)
        return next((s for s in self.subclusters if s.name == name), None)


class TopologyError(ValueError):
    """cc-backend's answer or a cluster.json is not a cluster configuration."""


def parse_clusters(doc: Any) -> dict[str, ClusterNumbering]:
    """``GET /api/clusters/``'s answer (or a list of cluster.json documents) by cluster
    name. A subcluster that cannot be read is kept with its problem; a document that is
    not a cluster configuration at all raises :class:`TopologyError`."""
    items = doc.get("clusters") if isinstance(doc, dict) and "clusters" in doc else doc
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise TopologyError("no 'clusters' list")
    out: dict[str, ClusterNumbering] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise TopologyError("a cluster without a name")
        out[item["name"]] = cluster_numbering(item)
    return out


def cluster_numbering(cluster: dict[str, Any]) -> ClusterNumbering:
    name = cluster["name"]
    subs: list[SubclusterNumbering] = []
    hosts: dict[str, str] = {}
    unlisted: list[str] = []
    for raw in cluster.get("subClusters") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise TopologyError(f"cluster {name}: a subcluster without a name")
        sub = subcluster_numbering(name, raw)
        subs.append(sub)
        try:
            listed = hostlist.expand_hostlist(str(raw.get("nodes") or ""))
        except hostlist.BadHostlist:
            unlisted.append(sub.name)
            continue
        for host in listed:
            hosts.setdefault(host, sub.name)  # cc-backend takes the first that lists it
    return ClusterNumbering(name, tuple(subs), hosts, tuple(unlisted))


def subcluster_numbering(cluster: str, raw: dict[str, Any]) -> SubclusterNumbering:
    name = raw["name"]
    topo = raw.get("topology") if isinstance(raw.get("topology"), dict) else {}
    accels = tuple(str(a.get("id")) for a in topo.get("accelerators") or []
                   if isinstance(a, dict) and a.get("id") is not None)
    try:
        sockets = [_ids(s) for s in topo.get("socket") or []]
        cores = [sorted(_ids(c)) for c in topo.get("core") or []]
    except (TypeError, ValueError):
        return _unusable(cluster, name, accels, "its topology's socket or core lists are "
                                                "not lists of processor ids")
    if not sockets or not cores:
        return _unusable(cluster, name, accels, "its topology lists no sockets or no cores")
    in_cores = {t for c in cores for t in c}
    loose = sorted({t for s in sockets for t in s} - in_cores)
    if loose and raw.get("threadsPerCore") == 1:
        # a socket's id that no core lists is a core of its own where a core is one thread:
        # cc-backend's own archive (alex: id 72 in no core) is written so
        cores += [[t] for t in loose]
    per_socket: list[list[list[int]]] = []
    placed = 0
    for socket in sockets:
        members = set(socket)
        inside = sorted((c for c in cores if c and set(c) <= members), key=lambda c: c[0])
        placed += len(inside)
        per_socket.append(inside)
    if placed != len(cores):
        return _unusable(cluster, name, accels, "a core of its topology is in no socket or "
                                                "in two")
    counts = {len(s) for s in per_socket}
    threads = {len(c) for s in per_socket for c in s}
    if len(counts) != 1 or len(threads) != 1:
        return _unusable(cluster, name, accels, "its sockets differ in cores or its cores "
                                                "in threads")
    cpus = tuple(t for s in per_socket for c in s for t in c)
    if len(set(cpus)) != len(cpus):
        return _unusable(cluster, name, accels, "a processor id is in two cores")
    return SubclusterNumbering(cluster, name, len(per_socket), counts.pop(), threads.pop(),
                               cpus, accels)


def _ids(values: Iterable[Any]) -> list[int]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"not a processor id: {v!r}")
        out.append(v)
    return out


def _unusable(cluster: str, name: str, accels: tuple[str, ...], why: str
              ) -> SubclusterNumbering:
    return SubclusterNumbering(cluster, name, 0, 0, 0, (), accels, why)
