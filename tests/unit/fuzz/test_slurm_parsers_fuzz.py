"""Bad input for the Slurm parsers: mutated recordings of every supported generation.

Each example takes a real recorded output (tests/fixtures/<version>/) and breaks one record:
keys deleted, values replaced by other types, nulls, huge or non-finite numbers, unicode,
text cut short. Every case must end in a parse or in a SlurmParseError that names the Slurm
version and the command, never in another exception; and a broken record must fail alone:
the records that were not touched parse exactly as they did before.
"""

from __future__ import annotations

import copy
import re
from dataclasses import fields
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccadapter.errors import SlurmParseError
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ControllerJob, NodeState, ParseContext, SacctRecord
from ccadapter.slurm.formats.scontrol import parse_scontrol_jobs
from ccadapter.slurm.formats.text import parse_nodes, version_from_meta
from ccadapter.slurm.join import controller_job
from tests.conftest import FIXTURES, VERSIONS, collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm

pytestmark = pytest.mark.fuzz

UTC = ZoneInfo("UTC")  # the recordings were made on machines running in UTC
SACCT = "sacct --json"
SCONTROL = "scontrol show job -d"

# --- values a mutation puts in -------------------------------------------------------------

TEXT = st.text(max_size=12) | st.sampled_from(["", "None", "N/A", "(null)", "²", "١٢", "𝟒",
                                              "n[1-", "n[1-99999999]", "\x00", "💥"])
NUMBERS = (st.integers(min_value=-(2**70), max_value=2**70)
           | st.sampled_from([0, -1, -2, 2**32 - 2, 2**32, 2**63, 2**64, 10**400])
           | st.floats())  # with nan and ±inf: json.loads reads NaN, Infinity and 1e999
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(TEXT, inner, max_size=3), max_leaves=5)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path inside a JSON record, parents before children."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_paths(value, (*prefix, i)))
    return out


def _replacement(draw: st.DrawFn, old: Any) -> Any:
    """Something of another shape than ``old``, or a nasty value of the same type."""
    kind = draw(st.sampled_from(["null", "value", "number", "text", "as_text", "wrap_list",
                                 "wrap_dict", "empty"]))
    if kind == "null":
        return None
    if kind == "number":
        return draw(NUMBERS)
    if kind == "text":
        return draw(TEXT)
    if kind == "as_text":
        return str(old)
    if kind == "wrap_list":
        return [old]
    if kind == "wrap_dict":
        return {"number": old}
    if kind == "empty":
        return type(old)() if isinstance(old, dict | list | str) else {}
    return draw(VALUES)


@st.composite
def mutated_record(draw: st.DrawFn, record: dict) -> dict:
    """A deep copy of ``record`` with one to three keys deleted or values replaced."""
    out = copy.deepcopy(record)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(out)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = out
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.integers(0, 3)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = _replacement(draw, parent[path[-1]])
    return out


# --- sacct JSON ----------------------------------------------------------------------------

SACCT_FILES = [(v, p.name) for v in VERSIONS for p in sorted((FIXTURES / v).glob("sacct-*.json"))]


def _assert_typed(exc: SlurmParseError, version: str, command: str) -> None:
    assert exc.version == version and exc.command == command, exc
    assert str(exc).startswith(f"Slurm {version}, `{command}`: "), exc


def _assert_shape(obj: Any) -> None:
    """A parsed record holds only what its annotations allow (no dict or list leaking)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        assert not isinstance(value, dict | list | float), (f.name, value)


@pytest.mark.parametrize(("version", "name"), SACCT_FILES)
@settings(max_examples=60)
@given(data=st.data())
def test_sacct_record_parses_or_names_version_and_command(version: str, name: str,
                                                          data: st.DataObject) -> None:
    doc = fixture_json(version, name)
    slurm = version_from_meta(doc, SACCT)
    parser = format_for(slurm, SACCT)
    ctx = ParseContext(str(slurm), SACCT)
    record = data.draw(st.sampled_from(doc["jobs"]).flatmap(mutated_record))
    try:
        parsed = parser.parse_sacct_job(record, ctx)
    except SlurmParseError as exc:
        _assert_typed(exc, str(slurm), SACCT)
    else:
        assert isinstance(parsed, SacctRecord)
        _assert_shape(parsed)


def _window(version: str, doc: dict, scontrol: str) -> Any:
    """Through the collector: slurmdbd lists the recorded runs; its JSON is ``doc``."""
    since = fixture_json(version, "testbed/workload.json")["since"]
    slurm = RecordedSlurm(version, doc, scontrol, clock=lambda: since + 600,
                          listing=fixture_json(version, "testbed/sacct-window.json"))
    collector = Collector(slurm, collector_settings(), clock=lambda: since + 600, tz=UTC)
    return collector.window(since)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40)
@given(data=st.data())
def test_one_bad_sacct_record_fails_alone(version: str, data: st.DataObject) -> None:
    """Through the collector: the window still holds every job whose record is intact."""
    doc = fixture_json(version, "testbed/sacct-window.json")
    scontrol = fixture_text(version, "testbed/scontrol-d-final.txt")
    before = _window(version, doc, scontrol)
    assert before.errors == []
    index = data.draw(st.integers(0, len(doc["jobs"]) - 1))
    doc["jobs"][index] = data.draw(mutated_record(doc["jobs"][index]))
    after = _window(version, doc, scontrol)
    # the job of the broken record: itself, or the het job it is a component of
    broken = fixture_json(version, "testbed/sacct-window.json")["jobs"][index]["job_id"]
    untouched = [j for j in before.jobs if broken not in j.slurm_ids]
    for job in untouched:
        assert job in after.jobs, f"job {job.job_id} lost by a broken other record"
    # the broken record is parsed, or reported, or (its id changed to one not asked for)
    # left out of the answer to the ids asked for
    assert len(after.jobs) + len(after.errors) - len(before.jobs) in (-1, 0, 1)
    prefix = f"Slurm {before.version}, `{SACCT}`: "
    assert all(err.startswith(prefix) for err in after.errors), after.errors


# --- scontrol show job -d (text) -----------------------------------------------------------

def _records(text: str) -> list[str]:
    return [r.strip("\n") for r in re.split(r"\n\s*\n", text) if r.strip()]


def _scontrol_text(version: str) -> str:
    files = sorted((FIXTURES / version).glob("scontrol-d-*.txt"))
    files += sorted((FIXTURES / version / "testbed").glob("scontrol-d-*.txt"))
    return "\n\n".join(p.read_text(encoding="utf-8").strip("\n") for p in files)


@st.composite
def mutated_text(draw: st.DrawFn, record: str) -> str:
    """One ``scontrol`` record with values replaced, tokens or lines dropped, or cut short;
    never with a blank line inside (that would make it two records)."""
    out = record
    for _ in range(draw(st.integers(1, 3))):
        tokens = list(re.finditer(r"(\w+)=(\S*)", out))
        words = list(re.finditer(r"\S+", out))
        kind = draw(st.sampled_from(["value", "value", "word", "drop_token", "drop_line",
                                     "cut", "insert"]))
        if kind == "word" and words:  # a whole field, as in squeue's "ID STATE NODES"
            m = draw(st.sampled_from(words))
            out = out[:m.start()] + draw(_TOKEN_VALUES) + out[m.end():]
        elif kind in ("value", "drop_token") and tokens:
            m = draw(st.sampled_from(tokens))
            new = "" if kind == "drop_token" else f"{m[1]}={draw(_TOKEN_VALUES)}"
            out = out[:m.start()] + new + out[m.end():]
        elif kind == "drop_line":
            lines = out.split("\n")
            del lines[draw(st.integers(0, len(lines) - 1))]
            out = "\n".join(lines)
        elif kind == "cut":
            out = out[:draw(st.integers(0, len(out)))]
        else:
            at = draw(st.integers(0, len(out)))
            out = out[:at] + draw(st.text(max_size=20)) + out[at:]
    # one record stays one record, and it is not taken for "No jobs in the system"
    out = re.sub(r"\n\s*\n", "\n", out).strip("\n")
    return out or "x"


_TOKEN_VALUES = (
    st.text(st.characters(blacklist_characters="\n\r \t\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029"),
            max_size=12)
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.sampled_from(["", "²", "١٢", "9" * 5000, "n[1-", "n[1-99999999]", "gpu:2(IDX:0-²)",
                       "gpu:2(IDX:5-1)", "gpu(IDX:0-9999999)", "0-1,x", "2-", "-", ":::",
                       "1-2:3:4:5", "UNLIMITED", "Unknown", "0001-01-01T00:00:00",
                       "9999-12-31T23:59:59", "1970-01-01T00:00:00"])
)


def _assert_scontrol_errors(errors: list[str], version: str) -> None:
    assert all(e.startswith(f"Slurm {version}, `{SCONTROL}`: ") for e in errors), errors


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150)
@given(data=st.data())
def test_scontrol_record_breaks_alone(version: str, data: st.DataObject) -> None:
    records = _records(_scontrol_text(version))
    ctx = ParseContext(version, SCONTROL)
    index = data.draw(st.integers(0, len(records) - 1))
    broken = data.draw(mutated_text(records[index]))
    jobs, errors = parse_scontrol_jobs("\n\n".join([*records[:index], broken,
                                                    *records[index + 1:]]), ctx)
    _assert_scontrol_errors(errors, version)
    assert len(errors) <= 1
    others, _ = parse_scontrol_jobs("\n\n".join(records[:index] + records[index + 1:]), ctx)
    own, _ = parse_scontrol_jobs(broken, ctx)
    for job_id, job in others.items():
        if job_id not in own:  # a broken JobId may name another recorded job
            assert jobs[job_id] == job
    for job in jobs.values():
        assert isinstance(job, ControllerJob)
        _assert_shape(job)
        # The fast path builds a Job from this alone: a Job, or None for an unclear time.
        built = controller_job(job, "cluster", UTC, [])
        assert built is None or built.job_id == job.job_id


# --- scontrol -o show node (as the collector ran it on the test bed) -------------------

def _nodes_text(version: str) -> str:
    """nodestate's ``scontrol -o show node`` answer, recorded (tests/recorded.py)."""
    commands = fixture_json(version, "testbed/commands-busy.json")["commands"]
    (answer,) = [c["stdout"] for c in commands if c["argv"][:3] == ["scontrol", "-o", "show"]]
    return answer.strip("\n")


@st.composite
def mutated_lines(draw: st.DrawFn, text: str) -> tuple[list[str], int]:
    """The lines of ``text`` with one of them broken; the broken line's index."""
    lines = text.split("\n")
    index = draw(st.integers(0, len(lines) - 1))
    broken = draw(mutated_text(lines[index])).replace("\n", " ")
    return [*lines[:index], broken, *lines[index + 1:]], index


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60)
@given(data=st.data())
def test_node_line_breaks_alone(version: str, data: st.DataObject) -> None:
    ctx = ParseContext(version, "scontrol -o show node")
    lines, index = data.draw(mutated_lines(_nodes_text(version)))
    nodes, errors = parse_nodes("\n".join(lines), ctx)
    assert len(errors) <= 1
    assert all(e.startswith(f"Slurm {version}, `scontrol -o show node`: ") for e in errors)
    others, _ = parse_nodes("\n".join(lines[:index] + lines[index + 1:]), ctx)
    for node in others:
        assert node in nodes
    for node in nodes:
        assert isinstance(node, NodeState)
        _assert_shape(node)
