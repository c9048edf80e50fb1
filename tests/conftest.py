"""Shared test helpers: recorded Slurm outputs and a runner that replays them."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ccadapter.config.keys import Config
from ccadapter.slurm.collector import CollectorSettings

FIXTURES = Path(__file__).parent / "fixtures"
# Every Slurm generation ccadapter reads; each has a real cluster in the test bed and a
# folder of recordings in tests/fixtures/.
VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
# The generations the heavy live suites run on (fault matrix, resilience, NATS, job cache,
# metrics...): the oldest, the most common and the newest, one per layout of sacct's JSON
# (22.05's, 23.11's to 25.11's, 26.05's). The README's table of releases says which suites
# run where.
HEAVY_VERSIONS = ("22.05", "24.11", "26.05")

# The first workload recorded in tests/fixtures/<version>/ (see tests/fixtures/README.md):
# job name -> job id. "cancelled_pending": a job cancelled before it started.
_REFERENCE_IDS = {  # 22.05, 24.11, 26.05: the ids of their recorded reference fixtures
    "22.05": {"complete": 2, "fail": 3, "multinode": 4, "gpujob": 5, "cancelled_pending": 7,
              "timeout": 9, "excl": 10},
    "24.11": {"complete": 1, "fail": 2, "multinode": 3, "gpujob": 4, "cancelled_pending": 6,
              "timeout": 8, "excl": 9},
    "26.05": {"complete": 2, "fail": 3, "multinode": 4, "gpujob": 5, "cancelled_pending": 7,
              "timeout": 9, "excl": 10},
}


def _workload_ids(version: str) -> dict[str, int]:
    """The other versions' single commands come from their test-bed recording's workload
    (tests/testbed/record_fixtures.py), whose ``cancelqueued`` was cancelled while pending."""
    if version in _REFERENCE_IDS:
        return _REFERENCE_IDS[version]
    meta = json.loads((FIXTURES / version / "testbed" / "workload.json").read_text())
    ids = {name: found[0] for name, found in meta["ids"].items()}
    return {**ids, "cancelled_pending": ids["cancelqueued"]}


WORKLOAD_IDS = {version: _workload_ids(version) for version in VERSIONS}


def required() -> bool:
    """CCADAPTER_REQUIRE_SLURM=1 (tests/run, CI): what the test bed provides must be there."""
    return os.environ.get("CCADAPTER_REQUIRE_SLURM") == "1"


def unavailable(msg: str) -> NoReturn:
    """The one place a test meets a missing part of the test bed (Slurm, nats-server, root):
    a failure where the test bed is required, a skip elsewhere."""
    if required():
        pytest.fail(msg)
    pytest.skip(msg)


def whoami() -> list[str]:
    """``check-config --user U --group G`` as this process: whether the host has a
    `cc-slurm-adapter` user or a `slurm` group (the README's install block makes both) must
    not change what a test sees."""
    import grp
    import pwd

    return ["--user", pwd.getpwuid(os.geteuid()).pw_name,
            "--group", grp.getgrgid(os.getegid()).gr_name]


def collector_settings(**config: Any) -> CollectorSettings:
    """The collector's settings of a config with these keys."""
    return CollectorSettings.from_config(Config(**config))


def fixture_text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(encoding="utf-8")


def fixture_json(version: str, name: str) -> Any:
    return json.loads(fixture_text(version, name))


def recorded_config(version: str, **settings: str) -> str:
    """The test bed's ``scontrol show config`` of that version (it boots no nodes: every
    setting of ccadapter.slurm.formats.text._BOOT_KEYS is "(null)"), ``settings`` changed."""
    config = next(c["stdout"] for c in fixture_json(version, "testbed/commands-busy.json")
                  ["commands"] if c["argv"][-2:] == ["show", "config"])
    for key, value in settings.items():
        config, n = re.subn(rf"^{key} .*$", f"{key} = {value}", config, flags=re.M)
        assert n == 1, key
    return config


class ReplayRunner:
    """Answers Slurm commands from a function of argv; counts calls like SlurmRunner."""

    def __init__(self, answer: Callable[[Sequence[str]], str]) -> None:
        self.answer = answer
        self.calls: Counter[str] = Counter()
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        self.calls[argv[0]] += 1
        self.argvs.append(list(argv))
        return self.answer(argv)


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return request.param


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CCADAPTER_SUITE=deploy keeps the tests marked ``deploy`` (the container under systemd),
    =main the others: tests/run runs the two sessions side by side, as the first mostly waits
    for systemd's timers. Unset: every test."""
    suite = os.environ.get("CCADAPTER_SUITE")
    if suite not in ("deploy", "main"):
        return
    keep = [i for i in items if (i.get_closest_marker("deploy") is not None) == (suite == "deploy")]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
