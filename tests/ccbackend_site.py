"""A cc-backend 1.5.4 site's files, as its documentation sets one up: ``cluster.json`` per
cluster in a file job archive, and ``.env``'s Ed25519 key pair. The standard library only:
the tests' servers (tests/ccbackend.py) and the demo's (tests/testbed/demo_site.py), which
runs without pytest, are made from them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Nodes:
    """A cluster as cc-backend's cluster.json names it: its nodes and which have GPUs.
    ``cpus``: per node, as 2 sockets of cpus/2 cores (the test bed's nodes have 4 or 8).
    ``smt``: the test bed's nodes 3 and 4 (of ``names`` too), SMT nodes of :data:`SMT` whose
    topologies number OS ids as Linux does: the first one socket after the other, with two
    GPUs named by PCI address, the second with interleaved sockets (:func:`linux_topology`)."""

    names: tuple[str, ...]
    gpu: tuple[str, ...] = ()
    cpus: int = 4
    gpus_per_node: int = 2
    smt: tuple[str, ...] = ()


PLOTTED = ("cpu_user", "acc_utilization", "cpu_load")  # the metrics of cluster_json()
SMT = (2, 4, 2)  # sockets, cores per socket, threads per core of the test bed's nodes 3 and 4
PCI_GPUS = ("00000000:3B:00.0", "00000000:AF:00.0")  # as cc-backend's own test archive names them


def nodes_of(cluster: Any, cpus: int = 4) -> Nodes:
    """A test-bed cluster (tests.integration.workload.Cluster: ``nodes``, ``gpu_node``,
    ``smt_nodes``)."""
    gpu = (cluster.gpu_node,) if getattr(cluster, "gpu_node", "") else ()
    return Nodes(tuple(cluster.nodes), gpu, cpus, smt=tuple(getattr(cluster, "smt_nodes", ())))


def linux_topology(sockets: int, cores: int, threads: int, interleaved: bool) -> dict[str, Any]:
    """A node's topology in OS ids, as the Linux kernel numbers an x86 SMT server: the first
    thread of every core first, then the second threads (the sibling of core i is
    i + sockets * cores); cores one socket after the other, or, ``interleaved``, alternating
    between the sockets (socket 0 even ids), as many dual-socket BIOSes enumerate them.
    ``core`` lists each socket's cores in turn, each core's threads in order."""
    per_node = sockets * cores

    def first_thread(socket: int, core: int) -> int:
        return core * sockets + socket if interleaved else socket * cores + core

    core_ids = [[first_thread(s, c) + t * per_node for t in range(threads)]
                for s in range(sockets) for c in range(cores)]
    socket_ids = [sorted(i for core in core_ids[s * cores:(s + 1) * cores] for i in core)
                  for s in range(sockets)]
    return {"node": list(range(per_node * threads)), "socket": socket_ids,
            "memoryDomain": socket_ids, "core": core_ids}


def subclusters(nodes: Nodes) -> dict[str, tuple[str, ...]]:
    """The cluster's subclusters, in cluster.json's order: ``gpu`` for the nodes with GPUs,
    ``main`` for the others (a stand-in given these places hosts as cc-backend does)."""
    plain = tuple(h for h in nodes.names if h not in nodes.gpu and h not in nodes.smt)
    smt = (("smt", nodes.smt[:1]), ("interleaved", nodes.smt[1:2]))
    return {sub: hosts for sub, hosts in (("gpu", nodes.gpu), ("main", plain), *smt) if hosts}


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

    def smt_subcluster(sub: str, hosts: Sequence[str]) -> dict[str, Any]:
        sockets, cores, threads = SMT
        topology = linux_topology(sockets, cores, threads, interleaved=sub == "interleaved")
        if sub == "smt":
            topology["accelerators"] = [{"id": pci, "type": "Nvidia GPU", "model": "tesla"}
                                        for pci in PCI_GPUS]
        return {**subcluster(sub, hosts, 0), "socketsPerNode": sockets,
                "coresPerSocket": cores, "threadsPerCore": threads, "topology": topology}

    subs = [smt_subcluster(sub, hosts) if sub in ("smt", "interleaved")
            else subcluster(sub, hosts, nodes.gpus_per_node if sub == "gpu" else 0)
            for sub, hosts in subclusters(nodes).items()]
    # as cc-metric-collector sends them (tests/testbed/collector_site.py): cpu_load and
    # mem_used per node, cpu_user per hwthread, acc_utilization per accelerator (what a job
    # page plots of the job's own resources: tests/metricstore.py), every 10 s
    return {"name": name, "subClusters": subs, "metricConfig": [
        {"name": "cpu_load", "unit": {"base": ""}, "scope": "node", "aggregation": "avg",
         "timestep": 10, "peak": 4, "normal": 2, "caution": 1, "alert": 0.5},
        {"name": "mem_used", "unit": {"base": "B", "prefix": "G"}, "scope": "node",
         "aggregation": "sum", "timestep": 10, "peak": 16, "normal": 8, "caution": 14,
         "alert": 15, "lowerIsBetter": True},
        {"name": "cpu_user", "unit": {"base": ""}, "scope": "hwthread", "aggregation": "avg",
         "timestep": 10, "peak": 100, "normal": 50, "caution": 20, "alert": 10},
        {"name": "acc_utilization", "unit": {"base": ""}, "scope": "accelerator",
         "aggregation": "avg", "timestep": 10, "peak": 100, "normal": 50, "caution": 20,
         "alert": 10}]}


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


def write_env(directory: Path, session: str | None = None) -> None:
    """cc-backend's ``.env``: a new Ed25519 key pair (:func:`keypair`) and the web session's
    key (``session``, kept across a re-keying; a new one if None), readable by its owner only
    from the first byte: it holds the key that signs every JWT."""
    public, private = keypair(directory)
    session = session or base64.b64encode(os.urandom(32)).decode()
    fd = os.open(directory / ".env", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f'JWT_PUBLIC_KEY="{public}"\nJWT_PRIVATE_KEY="{private}"\n'
                 f'SESSION_KEY="{session}"\n')


def token_in(output: str, name: str) -> str:
    """The JWT that ``cc-backend -jwt NAME`` printed for user ``name``."""
    marker = f"for user '{name}': "
    line = next((ln for ln in output.splitlines() if marker in ln), "")
    if not line:
        raise RuntimeError(f"cc-backend -jwt {name} printed no token: {output[-500:]}")
    return line.split(marker, 1)[1].strip()


def write_archive(archive: Path, clusters: Mapping[str, Nodes]) -> None:
    """A file job archive (version 3) with each cluster's ``cluster.json``."""
    archive.mkdir(parents=True, exist_ok=True)
    (archive / "version.txt").write_text("3\n")
    for name, nodes in clusters.items():
        (archive / name).mkdir(exist_ok=True)
        (archive / name / "cluster.json").write_text(json.dumps(cluster_json(name, nodes),
                                                                indent=1))
