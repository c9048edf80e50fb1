"""The cluster list (``sacctmgr list clusters``) per generation, over recorded real outputs."""

import json

import pytest

from ccadapter.errors import SlurmParseError, UnsupportedSlurmVersion
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ParseContext, SlurmVersion
from tests.conftest import ReplayRunner, fixture_text
from tests.fakeslurm import RELEASE

# What each recording lists: 22.05's slurmdbd holds cluster22 and clusterscale (the scale
# profile registers with cluster22's slurmdbd); the chroot clusters have a slurmdbd each.
RECORDED = {"22.05": ("sacctmgr-clusters.txt", ["cluster22", "clusterscale"]),
            "24.11": ("sacctmgr-clusters.json", ["cluster24"]),
            "26.05": ("sacctmgr-clusters.json", ["cluster26"]),
            # the source builds: a slurmdbd each, the cluster named by its release
            **{v: ("sacctmgr-clusters.json", [f"cluster{v.replace('.', '')}"])
               for v in ("23.02", "23.11", "24.05", "25.05", "25.11")}}


def parser(version):
    major, minor, micro = map(int, RELEASE[version].split("."))
    ver = SlurmVersion(major, minor, micro)
    return format_for(ver, "sacctmgr list clusters"), ParseContext(str(ver), "sacctmgr")


def test_each_generation_reads_its_recorded_list(version):
    name, expected = RECORDED[version]
    module, ctx = parser(version)
    assert module.parse_cluster_list(fixture_text(version, name), ctx) == (expected, [])
    assert ("--json" in module.CLUSTER_LIST_ARGS) == name.endswith(".json")


def test_cluster_list_asks_the_generation_once_then_its_form(version):
    name, expected = RECORDED[version]
    args = parser(version)[0].CLUSTER_LIST_ARGS

    def answer(argv):
        if argv == ["sacctmgr", "-V"]:
            return f"slurm-wlm {RELEASE[version]}\n"
        assert argv == ["sacctmgr", *args], argv
        return fixture_text(version, name)

    runner = ReplayRunner(answer)
    listing = ClusterList(runner)
    assert listing.names() == expected
    assert listing.names() == expected
    assert runner.argvs.count(["sacctmgr", "-V"]) == 1


def test_names_that_are_no_cluster_names_are_skipped_with_an_error():
    module, ctx = parser("22.05")
    names, errors = module.parse_cluster_list("cluster22\n../etc\ncluster22\n\nb-2\n", ctx)
    assert names == ["cluster22", "b-2"]
    assert len(errors) == 1 and "Slurm 22.05.8" in errors[0] and "'../etc'" in errors[0]
    module, ctx = parser("24.11")
    doc = json.loads(fixture_text("24.11", "sacctmgr-clusters.json"))
    doc["clusters"] += [{"name": 7}, {"nodes": "x"}, "c3"]
    names, errors = module.parse_cluster_list(json.dumps(doc), ctx)
    assert names == ["cluster24"] and len(errors) == 3


@pytest.mark.parametrize("out", ["not json", "[]", '{"meta": {}}', '{"clusters": {}}'])
def test_an_unreadable_json_list_names_the_version_and_command(out):
    module, ctx = parser("26.05")
    with pytest.raises(SlurmParseError, match=r"Slurm 26\.05\.5, `sacctmgr`"):
        module.parse_cluster_list(out, ctx)


def test_an_unknown_generation_is_refused():
    runner = ReplayRunner(lambda argv: "slurm 21.08.8\n")
    with pytest.raises(UnsupportedSlurmVersion, match=r"21\.08\.8"):
        ClusterList(runner).names()
    assert runner.argvs == [["sacctmgr", "-V"]]
