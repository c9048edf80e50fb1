"""Benchmark of the Slurm collector (issue 2): time to turn a recorded N-job sacct window
into jobs, per Slurm version. The window is built from the real records in
tests/fixtures/<version>/sacct-window.json (ids renumbered) and replayed without
subprocesses, so only our JSON decoding, parsing and joining is timed: the fake Slurm's
answers (the listing, and the JSON of each batch of ids) are made once before the timed
runs, which then replay them. (Slurm calls per
cycle, on the real clusters, are tests.bench.delivery's ``busy_cycle_calls``.)

Run: .venv/bin/python -m tests.bench.all --only parse
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from zoneinfo import ZoneInfo

from ccadapter.config.keys import Config
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.runner import Completed
from tests.conftest import fixture_json
from tests.fakeslurm import RecordedSlurm


def synthetic_window(version: str, n: int) -> str:
    doc = fixture_json(version, "sacct-window.json")
    base = [r for r in doc["jobs"] if r.get("nodes") != "None assigned"]
    jobs = []
    for i in range(n):
        rec = copy.deepcopy(base[i % len(base)])
        rec["job_id"] = 100_000 + i
        jobs.append(rec)
    doc["jobs"] = jobs
    return json.dumps(doc)


class Replayed:
    """A runner that asks the fake Slurm each question once and answers it again from
    memory: the fake filters and prints the whole recorded document for every batch of ids,
    work the real sacct does, not ccadapter."""

    def __init__(self, runner: RecordedSlurm) -> None:
        self.runner = runner
        self.answers: dict[tuple, str] = {}

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        key = (tuple(argv), tuple(sorted((env or {}).items())))
        if key not in self.answers:
            self.answers[key] = self.runner.run(argv, retry=retry, timeout=timeout, env=env)
        return self.answers[key]

    def unchecked(self, argv: Sequence[str], **kwargs) -> Completed:
        return self.runner.unchecked(argv, **kwargs)

    def ask(self, argv: Sequence[str], stdin: str, complete, **kwargs) -> Completed:
        return self.runner.ask(argv, stdin, complete, **kwargs)

    def lines(self, argv: Sequence[str], **kwargs) -> Iterator[str]:
        return self.runner.lines(argv, **kwargs)


def parse_times(version: str, n: int, runs: int) -> tuple[list[float], int]:
    """Seconds to collect a recorded ``n``-job window, per run; and the JSON's size."""
    text = synthetic_window(version, n)
    # clock far after the records: slurmctld would hold none of them, as for an old window
    runner = Replayed(RecordedSlurm(version, text, clock=lambda: 4e9))
    config = Config(slurmFetchJobScripts=False)
    collector = Collector(runner, CollectorSettings.from_config(config),
                          clock=lambda: 4e9, tz=ZoneInfo("UTC"))
    assert len(collector.window(0).jobs) == n  # the fake answers, once
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = collector.window(0)
        times.append(time.perf_counter() - started)
        assert len(result.jobs) == n and not result.errors
    return times, len(text)


class _BacklogSlurm:
    """The replayed Slurm (tests.bench.replay_slurm) asked each question once, then
    answered again from memory: its cost is not the collector's."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.answers: dict[tuple[str, ...], str] = {}

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        from tests.bench.replay_slurm import answer

        key = tuple(argv)
        if key not in self.answers:
            self.answers[key] = answer(self.base, list(argv), "")[0]
        return self.answers[key]


def backlog_parse_rate(base: Path, n_jobs: int) -> dict:
    """Jobs/s at which the collector alone (JSON decoding, the 24.11 parser, building the
    jobs) reads the pipeline backlog's sacct answers, in the batches of ids the daemon asks
    (:data:`~ccadapter.slurm.collector.IDS_PER_QUERY`), its Slurm answering from memory and
    slurmctld never asked (the clock is far after the runs ended): the limit of the enqueue
    rate for the same sacct output (tests.bench.delivery.write_backlog wrote it in
    ``base``). The second of two passes is timed."""
    from tests.bench.replay_slurm import FIRST_ID

    chunks = len(list(base.glob("window-*.json")))
    (base / "served").write_text(str(chunks))  # every chunk may be asked by id
    slurm = _BacklogSlurm(base)
    collector = Collector(slurm, CollectorSettings(fetch_job_scripts=False),
                          clock=lambda: 4e9, tz=ZoneInfo("UTC"))
    ids = list(range(FIRST_ID, FIRST_ID + n_jobs))
    for _ in collector.iter_jobs(ids, starts=()):
        pass  # the replayed Slurm asked, once
    started = time.perf_counter()
    jobs = sum(len(result.jobs) for result in collector.iter_jobs(ids, starts=()))
    seconds = time.perf_counter() - started
    if jobs != n_jobs:
        raise RuntimeError(f"the collector read {jobs} jobs of {n_jobs}")
    return {"jobs": n_jobs, "seconds": seconds, "jobs_per_s": n_jobs / seconds,
            "bytes": sum(len(text) for key, text in slurm.answers.items() if "--json" in key),
            "queries": sum("--json" in key for key in slurm.answers)}

if __name__ == "__main__":
    from tests.bench.all import main

    sys.exit(main(["--only", "parse", *sys.argv[1:]]))
