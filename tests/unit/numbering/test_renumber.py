"""Starts mapped into cc-backend's numbering as they are sent; what cannot be mapped is sent
as Slurm says and said once (issue 45)."""

from __future__ import annotations

import json
import logging

import pytest

from ccadapter.numbering.renumber import (
    REFRESH,
    RETRY,
    ClusterFiles,
    Renumbering,
    layouts_of,
    said_view,
)
from ccadapter.numbering.topology import TopologyError, parse_clusters
from ccadapter.numbering.translate import SlurmLayout
from ccadapter.slurm.formats.records import NodeState
from tests.unit.numbering.test_topology import smt_subcluster

PCI = ["00000000:3B:00.0", "00000000:AF:00.0"]


def cluster_doc(**sub):
    raw = {**smt_subcluster(nodes="n[1-2]"), **sub}
    raw["topology"] = {**smt_subcluster()["topology"], "accelerators": [
        {"id": a, "type": "Nvidia GPU", "model": "A40"} for a in PCI]}
    return {"name": "c", "subClusters": [raw]}


def body(hwthreads=(0, 1), accelerators=(), host="n1", job=7):
    res = {"hostname": host, "hwthreads": list(hwthreads)}
    if accelerators:
        res["accelerators"] = list(accelerators)
    return {"jobId": job, "cluster": "c", "startTime": 1, "resources": [res]}


class Bed:
    """A Renumbering over topologies and layouts a test changes, on a clock it moves."""

    def __init__(self, doc=None, layout=None):
        layout = layout or SlurmLayout(2, 4, 2, 16)
        self.doc = doc if doc is not None else [cluster_doc()]
        self.layout = {"n1": layout, "n2": layout}
        self.now = 0.0
        self.reads = 0
        self.records: list[str] = []
        self.counted: list[tuple[str, str]] = []
        self.fail = False
        self.r = Renumbering(self.topologies, lambda cluster: dict(self.layout),
                             clock=lambda: self.now, record=self.records.append,
                             unmapped=lambda c, why: self.counted.append((c, why)))

    def topologies(self):
        self.reads += 1
        if self.fail:
            raise OSError("connection refused")
        return parse_clusters(self.doc)


def test_a_start_leaves_in_linux_numbering_and_the_outbox_body_is_untouched():
    bed = Bed()
    sent = body([2, 3], ["1"])
    out = bed.r.start_body(sent)
    assert out["resources"][0]["hwthreads"] == [1, 9]
    assert out["resources"][0]["accelerators"] == [PCI[1]]
    assert sent["resources"][0]["hwthreads"] == [2, 3]  # what the outbox keeps
    assert bed.counted == [] and bed.records == ["{}"]


def test_two_jobs_on_one_node_never_share_an_os_id():
    bed = Bed()
    a = bed.r.start_body(body(range(0, 6)))["resources"][0]["hwthreads"]
    b = bed.r.start_body(body(range(6, 16)))["resources"][0]["hwthreads"]
    assert not set(a) & set(b) and sorted(a + b) == list(range(16))


def test_a_layout_that_differs_is_sent_as_slurm_says_and_said_once(caplog):
    bed = Bed(layout=SlurmLayout(1, 8, 2, 16))
    with caplog.at_level(logging.WARNING):
        first = bed.r.start_body(body([0, 1], job=1))
        bed.r.start_body(body([2, 3], job=2))
    assert first["resources"][0]["hwthreads"] == [0, 1]
    warnings = [r for r in caplog.records if "Slurm's numbering" in r.getMessage()]
    assert len(warnings) == 1 and "1x8x2" in warnings[0].getMessage()
    assert bed.counted == [("c", "layout-differs")] * 2
    [said] = said_view(bed.records[-1])
    assert said["subcluster"] == "smt" and said["reason"] == "layout-differs"
    assert said["job"] == 1 and said["host"] == "n1"


def test_without_a_topology_slurms_numbers_go_and_that_is_said(caplog):
    bed = Bed(doc=[])
    with caplog.at_level(logging.WARNING):
        out = bed.r.start_body(body([0, 1], ["0"]))
    assert out["resources"][0] == {"hostname": "n1", "hwthreads": [0, 1],
                                   "accelerators": ["0"]}
    [said] = said_view(bed.records[-1])
    assert said["reason"] == "no-topology" and "no cluster configuration of c" in said["detail"]


def test_a_topology_that_cannot_be_read_is_named_and_read_again_a_minute_later(caplog):
    bed = Bed()
    bed.fail = True
    with caplog.at_level(logging.WARNING):
        bed.r.start_body(body())
        bed.r.start_body(body())
    assert bed.reads == 1
    assert "connection refused" in said_view(bed.records[-1])[0]["detail"]
    bed.fail = False
    bed.now += RETRY
    assert bed.r.start_body(body())["resources"][0]["hwthreads"] == [0, 8]
    assert bed.reads == 2 and said_view(bed.records[-1]) == []


def test_a_changed_cluster_json_is_followed_and_clears_what_was_said():
    bed = Bed(layout=SlurmLayout(2, 4, 2, 16))
    bed.doc = [{"name": "c", "subClusters": [{**smt_subcluster(), "nodes": "other"}]}]
    bed.r.start_body(body())
    assert said_view(bed.records[-1])[0]["reason"] == "no-topology"
    bed.doc = [cluster_doc()]
    bed.now += REFRESH - 1
    assert bed.r.start_body(body())["resources"][0]["hwthreads"] == [0, 1]  # not yet
    bed.now += 1
    assert bed.r.start_body(body())["resources"][0]["hwthreads"] == [0, 8]
    assert said_view(bed.records[-1]) == []


def test_a_node_new_to_the_layouts_is_asked_again_at_most_once_a_minute():
    asked = []
    r = Renumbering(lambda: parse_clusters([cluster_doc()]),
                    lambda cluster: asked.append(cluster) or {}, clock=lambda: 0.0)
    r.start_body(body())
    r.start_body(body())
    assert asked == ["c"]


def test_a_start_without_resources_is_passed_as_it_is():
    bed = Bed()
    plain = {"jobId": 1, "cluster": "c", "resources": [{"hostname": "n1"}]}
    assert bed.r.start_body(plain) is plain and bed.reads == 0


def test_cluster_files_are_read_again_when_they_change(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({**cluster_doc(), "name": "c"}))
    files = ClusterFiles([str(path)])
    assert files()["c"].of_host("n1").cpus[:2] == (0, 8)
    path.write_text(json.dumps({**cluster_doc(), "name": "renamed"}))
    assert set(files()) == {"renamed"}
    path.write_text("{not json")
    with pytest.raises(TopologyError, match="not JSON"):
        files()


def test_layouts_of_keeps_nodes_that_say_their_layout():
    nodes = [NodeState("n1", ("IDLE",), 0, 0, 0, 2, 4, 2, 16),
             NodeState("old", ("IDLE",), 0, 0, 0)]
    assert layouts_of(nodes) == {"n1": SlurmLayout(2, 4, 2, 16)}
