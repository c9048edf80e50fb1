"""The evidence behind each version module: generations that share a parser write the
fields it reads alike, and a generation with a parser of its own writes them otherwise.

A field's layout is the set of JSON kinds it takes over every record of a version's recorded
workload window (``tests/fixtures/<version>/testbed/sacct-window.json``, the same workload on
every version): ``absent``, ``null``, ``int``, ``str``, ``number-object`` (``{"set",
"infinite", "number"}``), ``list[str]``, ``tres-list``, ``object``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import SlurmVersion
from tests.conftest import VERSIONS, fixture_json

# every field of a job record the parsers read (ccadapter.slurm.formats.values and the
# version modules)
READ = ("job_id", "state.current", "exit_code.return_code", "array.job_id", "array.task_id",
        "het.job_id", "het.job_offset", "time.start", "time.end", "time.submission",
        "time.limit", "tres.allocated", "nodes", "required.CPUs", "allocation_nodes",
        "cluster", "partition", "account", "user", "group", "name", "script", "exclusive",
        "oversubscribe")
_MISSING = object()


def kind(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | str):
        return type(value).__name__
    if isinstance(value, Mapping):
        return "number-object" if {"set", "infinite", "number"} <= set(value) else "object"
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value) and value:
            return "list[str]"
        if all(isinstance(v, Mapping) and {"type", "count"} <= set(v) for v in value):
            return "tres-list"
    return "other"


def at(record: Mapping[str, Any], path: str) -> Any:
    cur: Any = record
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def layout(version: str) -> dict[str, set[str]]:
    records = fixture_json(version, "testbed/sacct-window.json")["jobs"]
    return {path: {kind(at(r, path)) for r in records} for path in READ}


def parser(version: str) -> object:
    major, minor = map(int, version.split("."))
    return format_for(SlurmVersion(major, minor), "sacct --json").parse_sacct_job


PAIRS = list(itertools.pairwise(VERSIONS))


@pytest.mark.parametrize(("older", "newer"), PAIRS)
def test_a_shared_parser_means_a_shared_layout_and_a_new_one_a_new_layout(older, newer):
    before, after = layout(older), layout(newer)
    changed = {path: (before[path], after[path]) for path in READ if before[path] != after[path]}
    if parser(newer) is parser(older):
        assert changed == {}, f"{newer} reads as {older}, but writes otherwise"
    else:
        assert changed, f"{newer} has a parser of its own but writes as {older}"


def test_the_layouts_the_version_modules_name():
    """What the modules' docstrings say changed, as the recordings show it."""
    l2205, l2302, l2311, l2605 = (layout(v) for v in ("22.05", "23.02", "23.11", "26.05"))
    assert "int" in l2205["time.limit"] and l2302["time.limit"] == {"number-object"}
    assert l2205["script"] == {"absent"} and l2302["script"] == {"str"}
    assert l2302["state.current"] == {"str"} and l2311["state.current"] == {"list[str]"}
    assert l2302["exit_code.return_code"] == {"int"}
    assert l2311["exit_code.return_code"] == {"number-object"}
    assert l2311["exclusive"] == {"absent"} and l2605["exclusive"] == {"str"}
