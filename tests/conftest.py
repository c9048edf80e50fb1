"""Shared test helpers: recorded Slurm outputs and a runner that replays them."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ccadapter.config import Config
from ccadapter.slurm.collector import CollectorSettings

FIXTURES = Path(__file__).parent / "fixtures"
VERSIONS = ("22.05", "24.11", "26.05")

# The first workload recorded in tests/fixtures/<version>/ (see tests/fixtures/README.md):
# job name -> job id, per version.
WORKLOAD_IDS = {
    "22.05": {"complete": 2, "fail": 3, "multinode": 4, "gpujob": 5, "cancelrun": 7,
              "timeout": 9, "excl": 10},
    "24.11": {"complete": 1, "fail": 2, "multinode": 3, "gpujob": 4, "cancelrun": 6,
              "timeout": 8, "excl": 9},
    "26.05": {"complete": 2, "fail": 3, "multinode": 4, "gpujob": 5, "cancelrun": 7,
              "timeout": 9, "excl": 10},
}


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
