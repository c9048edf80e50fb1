"""The start bodies the daemon sends, in cc-backend's numbering, at the moment they are sent.

The outbox keeps what Slurm said (its abstract CPU ids, its GRES indices); each start is
mapped as it leaves, through the topology cc-backend holds then (``GET /api/clusters/``, or
the ``ccClusterJson`` files of a site that reaches cc-backend by NATS alone). So a start
enqueued while cc-backend was down is mapped when it is delivered, and a cc-backend restarted
with another cluster.json is followed within :data:`REFRESH` seconds, without restarting the
daemon. Slurm's layout of each node (``scontrol -o show node``) is kept as long.

Where a node cannot be mapped (no topology for it, a Slurm layout other than its
subcluster's, a GPU index past its accelerators) its resources go as Slurm numbers them,
and that is said once per cluster, subcluster and reason: a warning, a record for
``ccadapter status`` (``resourceNumbering``) and a count per reason
(``ccadapter_resources_unmapped_total``). A new topology clears what was said.

Called from the delivery workers: every method is safe from any thread.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ccadapter.numbering.topology import ClusterNumbering, TopologyError, parse_clusters
from ccadapter.numbering.translate import (
    SlurmLayout,
    Unmappable,
    os_accelerators,
    os_hwthreads,
)

log = logging.getLogger(__name__)

REFRESH = 300.0  # seconds a topology or the nodes' layouts are used before they are read again
RETRY = 60.0  # seconds between two reads of a source that failed, or of a host not found
NO_SUBCLUSTER = "(none)"  # the subcluster named for a host cc-backend places in none
STATE_KEY = "resource-numbering"  # the outbox state read by `status`

Topologies = Callable[[], dict[str, ClusterNumbering]]
Layouts = Callable[[str], Mapping[str, SlurmLayout]]  # cluster -> hostname -> layout


class Renumbering:
    """``topologies()``: every cluster's numbering (raises where it cannot be read: then
    the last one read is used, or none); ``layouts(cluster)``: Slurm's layout of the
    cluster's nodes; ``record(text)``: where what was said is kept for ``status``;
    ``unmapped(cluster, reason)``: counts a node sent in Slurm's numbering."""

    def __init__(self, topologies: Topologies, layouts: Layouts,
                 clock: Callable[[], float] = time.monotonic,
                 record: Callable[[str], None] | None = None,
                 unmapped: Callable[[str, str], None] | None = None) -> None:
        self._topologies = topologies
        self._layouts = layouts
        self.clock = clock
        self._record = record
        self._unmapped = unmapped
        self._lock = threading.Lock()
        self._topology: dict[str, ClusterNumbering] | None = None
        self._topology_at = -REFRESH
        self._topology_tried = -RETRY
        self._nodes: dict[str, tuple[float, Mapping[str, SlurmLayout]]] = {}
        self._nodes_tried: dict[str, float] = {}
        self._said: dict[str, dict[str, Any]] = {}
        self._read_error = ""  # why the topology's last reading failed; empty: it did not

    def start_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with its resources in cc-backend's numbering (a copy; ``body`` itself,
        as the outbox keeps it, is left in Slurm's)."""
        resources = body.get("resources")
        if not isinstance(resources, list) or not any(
                isinstance(r, dict) and (r.get("hwthreads") or r.get("accelerators"))
                for r in resources):
            return body
        cluster = str(body.get("cluster", ""))
        numbering = self._cluster(cluster)
        out = copy.deepcopy(body)
        for res in out["resources"]:
            if isinstance(res, dict):
                self._map(res, cluster, numbering, body.get("jobId"))
        return out

    def _map(self, res: dict[str, Any], cluster: str, numbering: ClusterNumbering | None,
             job_id: object) -> None:
        host = str(res.get("hostname", ""))
        sub = numbering.of_host(host) if numbering else None
        try:
            if res.get("hwthreads"):
                threads = os_hwthreads(res["hwthreads"], self._layout(cluster, host), sub)
            if res.get("accelerators"):
                accels = os_accelerators(res["accelerators"], sub)
        except Unmappable as exc:
            self._say(cluster, sub.name if sub else NO_SUBCLUSTER, exc, host, job_id,
                      numbering is None)
            return
        if res.get("hwthreads"):
            res["hwthreads"] = list(threads)
        if res.get("accelerators"):
            res["accelerators"] = list(accels)

    def _say(self, cluster: str, sub: str, exc: Unmappable, host: str, job_id: object,
             no_cluster: bool) -> None:
        if self._unmapped:
            self._unmapped(cluster, exc.reason.value)
        key = f"{cluster}/{sub}/{exc.reason.value}"
        detail = exc.detail
        if no_cluster:
            detail = (f"cc-backend's cluster configuration cannot be read: {self._read_error}"
                      if self._read_error and self._topology is None
                      else f"cc-backend holds no cluster configuration of {cluster}")
        with self._lock:
            if key in self._said:
                self._said[key]["starts"] += 1
                return
            self._said[key] = {"cluster": cluster, "subcluster": sub,
                               "reason": exc.reason.value, "detail": detail,
                               "host": host, "job": job_id, "starts": 1}
            said = json.dumps(self._said)
        log.warning("resources of cluster %s, subcluster %s sent in Slurm's numbering "
                    "(abstract CPU ids, GRES indices), not cc-backend's: %s (node %s, job "
                    "%s first; said once until cc-backend's topology changes)", cluster, sub,
                    detail, host, job_id)
        if self._record:
            self._record(said)

    def _cluster(self, cluster: str) -> ClusterNumbering | None:
        now = self.clock()
        with self._lock:
            stale = now - self._topology_at >= REFRESH and now - self._topology_tried >= RETRY
            if stale:
                self._topology_tried = now
                try:
                    fresh = self._topologies()
                except Exception as exc:  # any failure: the last reading is used
                    if not self._read_error:
                        log.warning("cc-backend's cluster configuration cannot be read (%s): "
                                    "starts are mapped through %s until it can", exc,
                                    "the last reading" if self._topology is not None
                                    else "none, in Slurm's numbering,")
                    self._read_error = str(exc)
                else:
                    self._topology_at = now
                    if self._read_error:
                        log.info("cc-backend's cluster configuration read again")
                        self._read_error = ""
                    if fresh != self._topology:
                        self._changed(fresh)
            return (self._topology or {}).get(cluster)

    def _changed(self, fresh: dict[str, ClusterNumbering]) -> None:
        """Under the lock: a new topology; what was said of the old one no longer holds
        (nor what a daemon that ran before said: the first reading clears it too)."""
        first = self._topology is None
        if not first:
            log.info("cc-backend's cluster configuration changed: starts are mapped "
                     "through the new one")
        self._topology = fresh
        if self._said or first:
            self._said.clear()
            if self._record:
                self._record("{}")
        for cluster in fresh.values():
            for sub in cluster.unlisted:
                log.warning("cc-backend's subcluster %s of %s has a host list that cannot "
                            "be read: its nodes are mapped as nodes of no subcluster",
                            sub, cluster.name)

    def _layout(self, cluster: str, host: str) -> SlurmLayout | None:
        now = self.clock()
        with self._lock:
            at, known = self._nodes.get(cluster, (-REFRESH, {}))
            fresh = now - at < REFRESH and host in known
            if not fresh and now - self._nodes_tried.get(cluster, -RETRY) >= RETRY:
                self._nodes_tried[cluster] = now
                try:
                    known = self._layouts(cluster)
                except Exception as exc:  # any failure: the last reading is used
                    log.warning("Slurm's node layouts of %s not read: %s", cluster, exc)
                else:
                    self._nodes[cluster] = (now, known)
            return known.get(host)


class ClusterFiles:
    """The topologies of cc-backend's cluster.json files (``ccClusterJson``), read again
    when one of them changes (its mtime or size); raises OSError or TopologyError where a
    file cannot be read, so that the last reading is kept."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = [Path(p) for p in paths]
        self._seen: tuple[tuple[int, int], ...] | None = None
        self._read: dict[str, ClusterNumbering] = {}

    def __call__(self) -> dict[str, ClusterNumbering]:
        stats = tuple((st.st_mtime_ns, st.st_size) for st in (p.stat() for p in self.paths))
        if stats != self._seen:
            docs = []
            for path in self.paths:
                try:
                    docs.append(json.loads(path.read_text(encoding="utf-8")))
                except ValueError as exc:
                    raise TopologyError(f"{path}: not JSON: {exc}") from None
            self._read, self._seen = parse_clusters(docs), stats
        return self._read


def layouts_of(nodes: Iterable[Any]) -> dict[str, SlurmLayout]:
    """Slurm's layout of each node that says it (``scontrol -o show node`` as
    :class:`~ccadapter.slurm.formats.records.NodeState` holds it)."""
    return {n.hostname: SlurmLayout(n.sockets, n.cores_per_socket, n.threads_per_core, n.cpus)
            for n in nodes if n.sockets and n.cores_per_socket and n.threads_per_core}


def said_view(text: str | None) -> list[dict[str, Any]]:
    """What ``status`` shows of :data:`STATE_KEY`: one entry per cluster, subcluster and
    reason whose resources are sent in Slurm's numbering."""
    try:
        said = json.loads(text) if text else {}
    except ValueError:
        return []
    return list(said.values()) if isinstance(said, dict) else []
