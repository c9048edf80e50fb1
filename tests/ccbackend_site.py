"""A cc-backend 1.5.4 site's files, as its documentation sets one up: ``cluster.json`` per
cluster in a file job archive, and ``.env``'s Ed25519 key pair. The standard library only:
the tests' servers (tests/ccbackend.py) and the demo's (tests/testbed/demo_site.py), which
runs without pytest, are made from them."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Nodes:
    """A cluster as cc-backend's cluster.json names it: its nodes and which have GPUs.
    ``cpus``: per node, as 2 sockets of cpus/2 cores (the test bed's nodes have 4 or 8)."""

    names: tuple[str, ...]
    gpu: tuple[str, ...] = ()
    cpus: int = 4
    gpus_per_node: int = 2


def nodes_of(cluster: Any, cpus: int = 4) -> Nodes:
    """A test-bed cluster (tests.integration.workload.Cluster: ``nodes``, ``gpu_node``)."""
    gpu = (cluster.gpu_node,) if getattr(cluster, "gpu_node", "") else ()
    return Nodes(tuple(cluster.nodes), gpu, cpus)


def subclusters(nodes: Nodes) -> dict[str, tuple[str, ...]]:
    """The cluster's subclusters, in cluster.json's order: ``gpu`` for the nodes with GPUs,
    ``main`` for the others (a stand-in given these places hosts as cc-backend does)."""
    plain = tuple(h for h in nodes.names if h not in nodes.gpu)
    return {sub: hosts for sub, hosts in (("gpu", nodes.gpu), ("main", plain)) if hosts}


def cluster_json(name: str, nodes: Nodes) -> dict[str, Any]:
    """A cluster.json cc-backend 1.5.4 accepts: a metric, and a subcluster per kind of node
    (its ``nodes`` a comma-separated host list; never ``*``, which makes cc-backend drop every
    node state: GetSubClusterByNode falls back only for an empty first list)."""
    cores = max(1, nodes.cpus // 2)
    ids = list(range(2 * cores))

    def subcluster(sub: str, hosts: Sequence[str], gpus: int) -> dict[str, Any]:
        topology: dict[str, Any] = {
            "node": ids, "socket": [ids[:cores], ids[cores:]],
            "memoryDomain": [ids[:cores], ids[cores:]], "core": [[i] for i in ids]}
        if gpus:
            topology["accelerators"] = [{"id": str(i), "type": "Nvidia GPU", "model": "tesla"}
                                        for i in range(gpus)]
        rate = {"unit": {"base": "F/s", "prefix": "G"}, "value": 10}
        return {"name": sub, "nodes": ",".join(hosts), "processorType": "test bed",
                "socketsPerNode": 2, "coresPerSocket": cores, "threadsPerCore": 1,
                "flopRateScalar": rate, "flopRateSimd": {**rate, "value": 40},
                "memoryBandwidth": {"unit": {"base": "B/s", "prefix": "G"}, "value": 20},
                "topology": topology}

    subs = [subcluster(sub, hosts, nodes.gpus_per_node if sub == "gpu" else 0)
            for sub, hosts in subclusters(nodes).items()]
    return {"name": name, "subClusters": subs, "metricConfig": [
        {"name": "cpu_load", "unit": {"base": ""}, "scope": "node", "aggregation": "avg",
         "timestep": 60, "peak": 4, "normal": 2, "caution": 1, "alert": 0.5}]}


def keypair(directory: Path) -> tuple[str, str]:
    """An Ed25519 key pair as cc-backend's .env wants it (std base64: the raw 32-byte public
    key; the private key as Go holds it, seed || public), made by openssl."""
    der = directory / "jwt-key.der"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-outform", "DER",
                    "-out", str(der)], check=True, capture_output=True, timeout=30,
                   stdin=subprocess.DEVNULL)
    pub = subprocess.run(["openssl", "pkey", "-inform", "DER", "-in", str(der), "-pubout",
                          "-outform", "DER"], check=True, capture_output=True, timeout=30,
                         stdin=subprocess.DEVNULL).stdout[-32:]
    seed = der.read_bytes()[-32:]
    der.unlink()
    return base64.b64encode(pub).decode(), base64.b64encode(seed + pub).decode()
