"""Rules the test suite keeps, checked over its own source (issue 29): one meaning of
CCADAPTER_REQUIRE_SLURM, and no skip in CI but for a machine without IPv6."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import unavailable

TESTS = Path(__file__).resolve().parents[1]


def test_require_slurm_means_one_thing(monkeypatch):
    """Only ``=1`` requires the test bed (as tests/run sets it); read in one place."""
    monkeypatch.setenv("CCADAPTER_REQUIRE_SLURM", "1")
    with pytest.raises(pytest.fail.Exception, match="missing part"):
        unavailable("missing part")
    monkeypatch.setenv("CCADAPTER_REQUIRE_SLURM", "0")
    with pytest.raises(pytest.skip.Exception, match="missing part"):
        unavailable("missing part")
    read = re.compile(r"(environ\.get|environ\[|getenv)\(?\s*[\"']CCADAPTER_REQUIRE_SLURM")
    readers = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py")
               if read.search(p.read_text())]
    assert readers == ["conftest.py"]


def test_no_skip_but_for_a_missing_ipv6_stack():
    """Every skip goes through conftest.unavailable (a failure in CI), or is about IPv6."""
    found = []
    for path in TESTS.rglob("*.py"):
        if path == TESTS / "conftest.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pytest\.skip\(|skipif|importorskip", line) and "IPv6" not in line:
                found.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    assert found == []
