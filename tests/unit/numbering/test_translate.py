"""One node's allocation from Slurm's numbering into cc-backend's (issue 45)."""

from __future__ import annotations

import pytest

from ccadapter.numbering.topology import parse_clusters
from ccadapter.numbering.translate import (
    Reason,
    SlurmLayout,
    Unmappable,
    os_accelerators,
    os_hwthreads,
)
from tests.unit.numbering.test_topology import smt_subcluster

SMT = SlurmLayout(2, 4, 2, 16)
PCI = ["00000000:3B:00.0", "00000000:AF:00.0"]


def sub(raw=None):
    raw = raw or {**smt_subcluster(), "topology": {
        **smt_subcluster()["topology"],
        "accelerators": [{"id": a, "type": "Nvidia GPU", "model": "A40"} for a in PCI]}}
    return parse_clusters([{"name": "c", "subClusters": [raw]}])["c"].of_host("n1")


def slurm_cpu(socket: int, core: int, thread: int, layout: SlurmLayout = SMT) -> int:
    """Slurm's abstract id, as doc/html/cpu_management.shtml counts: socket by socket, core
    by core, thread by thread."""
    return (socket * layout.cores_per_socket + core) * layout.threads_per_core + thread


def test_one_core_on_an_smt_node_is_both_its_linux_threads():
    # Slurm CPU_IDs=0-1: core 0's two threads; Linux numbers them 0 and 8
    assert os_hwthreads([0, 1], SMT, sub()) == (0, 8)


def test_every_abstract_id_maps_to_the_linux_id_of_its_socket_core_and_thread():
    s = sub()
    for socket in range(2):
        for core in range(4):
            for thread in range(2):
                linux = socket * 4 + core + thread * 8
                assert os_hwthreads([slurm_cpu(socket, core, thread)], SMT, s) == (linux,)


def test_a_whole_socket_and_a_whole_node():
    assert os_hwthreads(range(8), SMT, sub()) == (0, 1, 2, 3, 8, 9, 10, 11)
    assert os_hwthreads(range(16), SMT, sub()) == tuple(range(16))


def test_slurm_counting_cores_as_cpus_on_smt_gives_whole_cores():
    # CPUs=8 on a 2x4x2 node: Slurm's CPU i is core i
    assert os_hwthreads([1], SlurmLayout(2, 4, 2, 8), sub()) == (1, 9)


def test_a_layout_other_than_the_topologys_is_not_mapped():
    with pytest.raises(Unmappable) as err:
        os_hwthreads([0], SlurmLayout(1, 4, 1, 4), sub())
    assert err.value.reason is Reason.LAYOUT_DIFFERS and "1x4x1" in err.value.detail


def test_no_subcluster_or_no_layout():
    with pytest.raises(Unmappable) as err:
        os_hwthreads([0], SMT, None)
    assert err.value.reason is Reason.NO_TOPOLOGY
    with pytest.raises(Unmappable) as err:
        os_hwthreads([0], None, sub())
    assert err.value.reason is Reason.NO_LAYOUT


def test_an_id_past_the_topology():
    with pytest.raises(Unmappable) as err:
        os_hwthreads([16], SMT, sub())
    assert err.value.reason is Reason.LAYOUT_DIFFERS


def test_gres_indices_become_the_topologys_pci_ids_and_names_stay():
    assert os_accelerators(["1"], sub()) == (PCI[1],)
    assert os_accelerators(["0", "1"], sub()) == tuple(PCI)
    assert os_accelerators(["00000000:3B:00.0"], None) == ("00000000:3B:00.0",)
    with pytest.raises(Unmappable) as err:
        os_accelerators(["2"], sub())
    assert err.value.reason is Reason.GPU_INDEX
