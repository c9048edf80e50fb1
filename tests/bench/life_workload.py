"""A site's month of jobs for the month-of-life run (tests/bench/life.py): a deterministic
mix drawn from a seed, so the simulated Slurm that answers the daemon and the driver that
checks cc-backend derive the same runs without sharing memory.

Each submission is one of the kinds the test bed's workload recorded on Slurm 22.05
(tests/fixtures/22.05/testbed/: ``complete``, ``fail``, ``multinode``, ``gpujob``, ``hetjob``,
``arr``, ``cancelqueued``, ``cancelrun``, ``timeout``, ``excl``), whose records the simulated
Slurm prints with this run's ids and times; ``long`` (a ``complete`` of 4 to 30 hours),
``nodefail`` (ended NODE_FAIL) and ``requeue`` (a first run ended REQUEUED, then a second run
of the same id: minutes later, or, for one in ten, 25 hours later) use those records too.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator
from dataclasses import dataclass

DAY = 86400
# kind -> (share of submissions, shortest, longest run in seconds)
MIX: dict[str, tuple[float, int, int]] = {
    "complete": (0.36, 30, 900), "fail": (0.08, 5, 300), "multinode": (0.08, 600, 4 * 3600),
    "gpujob": (0.08, 600, 6 * 3600), "long": (0.04, 4 * 3600, 30 * 3600),
    "arr": (0.08, 120, 1800), "hetjob": (0.04, 300, 3600), "cancelqueued": (0.05, 60, 3600),
    "cancelrun": (0.04, 60, 1800), "timeout": (0.04, 1800, 7200), "excl": (0.05, 60, 1800),
    "nodefail": (0.01, 600, 7200), "requeue": (0.05, 300, 3600),
}
TEMPLATE = {"long": "complete", "nodefail": "complete", "requeue": "complete"}
FINAL = {"complete": "COMPLETED", "fail": "FAILED", "multinode": "COMPLETED",
         "gpujob": "COMPLETED", "arr": "COMPLETED", "hetjob": "COMPLETED",
         "cancelqueued": "CANCELLED", "cancelrun": "CANCELLED", "timeout": "TIMEOUT",
         "excl": "COMPLETED"}
ARRAY_TASKS = 3
HOOKED_SHARE = 0.3  # of submissions: their PrologSlurmctld/EpilogSlurmctld reach the daemon


@dataclass(frozen=True, slots=True)
class Run:
    """One run as slurmdbd records it (a requeued job has two, under one id)."""

    job_id: int
    kind: str  # the recorded template it is printed from
    submit: int
    start: int  # 0: never ran (cancelled while queued)
    end: int  # when it ended (a queued job: when it was cancelled)
    state: str  # sacct's final state
    array_job_id: int = 0
    array_task: int = -1
    het_leader: int = 0
    het_offset: int = -1
    hooked: bool = False
    limit_min: int = 0  # 0: the template's time limit
    first_of_requeue: bool = False
    eligible: int = 0  # 0: at submission (a requeued job's second run: when requeued)

    @property
    def ran(self) -> bool:
        return self.start > 0

    def state_at(self, now: float) -> str:
        if now >= self.end:
            return self.state
        if self.start and now >= self.start:
            return "RUNNING"
        return "PENDING"


class Workload:
    """``per_day`` submissions a day for ``days`` days from ``t0`` (site time)."""

    def __init__(self, seed: int, per_day: int, days: float, t0: float,
                 first_id: int = 1000) -> None:
        self.t0, self.per_day, self.days = int(t0), per_day, days
        rng = random.Random(seed)
        kinds = list(MIX)
        weights = [MIX[k][0] for k in kinds]
        runs: list[Run] = []
        next_id = first_id
        total = int(per_day * days)
        for i in range(total):
            submit = self.t0 + int(i * DAY / per_day) + rng.randrange(0, max(1, DAY // per_day))
            kind = rng.choices(kinds, weights)[0]
            _, low, high = MIX[kind]
            hooked = rng.random() < HOOKED_SHARE
            start = submit + rng.randrange(0, 300)
            length = rng.randrange(low, high + 1)
            template = TEMPLATE.get(kind, kind)
            if kind == "arr":
                for task in range(ARRAY_TASKS):
                    s = start + task * rng.randrange(0, 120)
                    runs.append(Run(next_id + task, "arr", submit, s, s + length, "COMPLETED",
                                    array_job_id=next_id, array_task=task + 1, hooked=hooked))
                next_id += ARRAY_TASKS
            elif kind == "hetjob":
                for offset in (0, 1):
                    runs.append(Run(next_id + offset, "hetjob", submit, start, start + length,
                                    "COMPLETED", het_leader=next_id, het_offset=offset,
                                    hooked=hooked))
                next_id += 2
            elif kind == "cancelqueued":
                runs.append(Run(next_id, kind, submit, 0, submit + length, "CANCELLED"))
                next_id += 1
            elif kind == "requeue":
                first_end = start + length
                later = 25 * 3600 if rng.random() < 0.1 else rng.randrange(60, 900)
                second = first_end + later
                runs.append(Run(next_id, template, submit, start, first_end, "REQUEUED",
                                hooked=hooked, first_of_requeue=True))
                runs.append(Run(next_id, template, submit, second,
                                second + rng.randrange(low, high + 1), "COMPLETED",
                                hooked=hooked, eligible=first_end))
                next_id += 1
            else:
                state = "NODE_FAIL" if kind == "nodefail" else FINAL[template]
                limit = length // 60 if kind == "timeout" else 0
                end = start + limit * 60 if limit else start + length
                runs.append(Run(next_id, template, submit, start, end, state, hooked=hooked,
                                limit_min=limit))
                next_id += 1
        self.runs = runs
        self.by_id: dict[int, list[Run]] = {}
        for run in runs:
            self.by_id.setdefault(run.job_id, []).append(run)
        self.by_end = sorted(runs, key=lambda r: r.end)
        self._ends = [r.end for r in self.by_end]
        self.by_submit = runs  # made in submit order
        self._submits = [r.submit for r in runs]
        self.last_id = next_id - 1

    def ended_between(self, a: float, b: float) -> list[Run]:
        lo = bisect.bisect_left(self._ends, a)
        hi = bisect.bisect_right(self._ends, b)
        return self.by_end[lo:hi]

    def submitted_by(self, now: float) -> int:
        """How many runs were submitted by ``now`` (an index into :attr:`by_submit`)."""
        return bisect.bisect_right(self._submits, now)

    def het_components(self, leader: int) -> list[Run]:
        out = []
        job_id = leader
        while True:
            found = [r for r in self.by_id.get(job_id, []) if r.het_leader == leader]
            if not found:
                return out
            out += found
            job_id += 1

    def events(self) -> Iterator[tuple[int, str, Run]]:
        """Hook messages slurmctld sends, in site-time order: (when, context, run)."""
        out = []
        for run in self.runs:
            if run.hooked and run.ran:
                out.append((run.start, "prolog_slurmctld", run))
                out.append((run.end, "epilog_slurmctld", run))
        out.sort(key=lambda e: (e[0], e[2].job_id))
        yield from out
