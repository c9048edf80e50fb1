"""Every recorded fixture is listed, with its recording command, in tests/fixtures/README.md."""

from __future__ import annotations

import re

from tests.conftest import FIXTURES

# placeholders the README uses in file names: N, A_B (job ids), * (a scenario)
_PLACEHOLDERS = {"N": r"\d+", "A": r"\d+", "B": r"\d+", "*": r"[\w-]+"}


def _listed() -> list[re.Pattern[str]]:
    """The README's file names (first column of its tables) as patterns, per section."""
    patterns = []
    section = ""
    for line in (FIXTURES / "README.md").read_text().splitlines():
        if line.startswith("## "):
            m = re.search(r"`([^`]*)`", line)
            section = m[1].replace("<version>", r"\d\d\.\d\d") if m else ""
        m = re.match(r"\| `([^`]+)` \|", line)
        if m:
            name = "".join(_PLACEHOLDERS.get(c, re.escape(c)) for c in m[1])
            patterns.append(re.compile(section + name))
    return patterns


def test_every_fixture_has_its_recording_command():
    listed = _listed()
    files = [p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*")
             if p.is_file() and p.name != "README.md"]
    assert files
    unlisted = [f for f in files if not any(p.fullmatch(f) for p in listed)]
    assert unlisted == []


def test_every_listed_name_has_a_file():
    files = [p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*") if p.is_file()]
    assert [p.pattern for p in _listed() if not any(p.fullmatch(f) for f in files)] == []
