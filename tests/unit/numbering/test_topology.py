"""cc-backend's cluster configuration read as Slurm's order of OS ids (issue 45)."""

from __future__ import annotations

import json

import pytest

from ccadapter.numbering.topology import TopologyError, parse_clusters
from tests.conftest import FIXTURES


def smt_subcluster(name: str = "smt", nodes: str = "n[1-2]") -> dict:
    """2 sockets x 4 cores x 2 threads as Linux numbers them: core i is [i, i + 8]."""
    cores = [[i, i + 8] for i in range(8)]
    return {"name": name, "nodes": nodes, "socketsPerNode": 2, "coresPerSocket": 4,
            "threadsPerCore": 2,
            "topology": {"node": list(range(16)),
                         "socket": [[*range(4), *range(8, 12)], [*range(4, 8), *range(12, 16)]],
                         "core": cores}}


def test_smt_threads_of_a_core_follow_each_other_in_slurms_order():
    sub = parse_clusters({"clusters": [{"name": "c", "subClusters": [smt_subcluster()]}]})[
        "c"].of_host("n2")
    assert sub is not None and not sub.problem
    assert (sub.sockets, sub.cores_per_socket, sub.threads_per_core) == (2, 4, 2)
    assert sub.cpus == (0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15)


def test_interleaved_sockets_give_socket_0_the_even_ids():
    cores = [[k, k + 8] for k in range(8)]
    raw = {"name": "il", "nodes": "n3",
           "topology": {"socket": [[i for i in range(16) if i % 2 == 0],
                                   [i for i in range(16) if i % 2]],
                        "core": cores}}
    sub = parse_clusters([{"name": "c", "subClusters": [raw]}])["c"].of_host("n3")
    assert sub is not None and (sub.sockets, sub.cores_per_socket, sub.threads_per_core) == (
        2, 4, 2)
    assert sub.cpus[:8] == (0, 8, 2, 10, 4, 12, 6, 14)  # socket 0's cores 0..3
    assert sub.cpus[8:10] == (1, 9)  # socket 1's first core


def test_cc_backends_own_alex_archive():
    doc = json.loads((FIXTURES / "cc-backend-1.5.4" / "alex-cluster.json").read_text())
    alex = parse_clusters([doc])["alex"]
    a40 = alex.of_host("a0225")
    assert a40 is not None and a40.name == "a40" and not a40.problem
    assert (a40.sockets, a40.cores_per_socket, a40.threads_per_core) == (2, 64, 1)
    assert a40.cpus == tuple(range(128))
    assert a40.accelerators[:2] == ("00000000:01:00.0", "00000000:25:00.0")
    assert alex.of_host("a0603").name == "a100"
    assert alex.of_host("x9") is None


def test_a_core_in_no_socket_makes_the_subcluster_unusable_with_a_reason():
    raw = {"name": "bad", "nodes": "n1",
           "topology": {"socket": [[0, 1]], "core": [[0], [1], [2]],
                        "accelerators": [{"id": "gpu0"}]}}
    sub = parse_clusters([{"name": "c", "subClusters": [raw]}])["c"].of_host("n1")
    assert sub is not None and "in no socket" in sub.problem
    assert sub.accelerators == ("gpu0",)


def test_a_host_list_that_cannot_be_read_is_named():
    raw = smt_subcluster(nodes="n[1-")
    cluster = parse_clusters([{"name": "c", "subClusters": [raw]}])["c"]
    assert cluster.unlisted == ("smt",) and cluster.of_host("n1") is None


def test_the_first_subcluster_listing_a_host_holds_it():
    subs = [smt_subcluster("first", "n[1-2]"), smt_subcluster("second", "n2")]
    assert parse_clusters([{"name": "c", "subClusters": subs}])["c"].of_host("n2").name == \
        "first"


@pytest.mark.parametrize("doc", [{"clusters": 3}, [{"subClusters": []}], "text"])
def test_what_is_no_cluster_configuration_raises(doc):
    with pytest.raises(TopologyError):
        parse_clusters(doc)
