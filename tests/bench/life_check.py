"""What cc-backend holds after the month-of-life run, compared with the runs the workload
made Slurm run (tests/bench/life_workload.py), read through cc-backend's own API.

Each run that started must be held exactly once, under its job id and start time, with
Slurm's state, duration, array id and nodes. The documented exceptions are counted apart,
never as lost: of a job requeued within 24 h, cc-backend 1.5.4 holds the run whose start it
took first and refuses the other (one run of a job id a day; the refused run's summary goes
into the held one's metaData, README "Requeued jobs"), so one of the two must be held, either
(usually the first; the later one when the hook announced it first); a het job's components
after the leader (one job in cc-backend); and the two jobs whose records Slurm cannot print
or ccadapter cannot read (listed by ``ccadapter unreadable list``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import hostlist

from tests.bench.life_workload import Run, Workload
from tests.integration.expect import CC_STATE

# the hosts of each recorded kind (tests/fixtures/22.05/testbed/sacct-window.json)
NODES = {"complete": "n1", "fail": "n1", "multinode": "n[1-2]", "gpujob": "n1",
         "hetjob": "n[1-2]", "arr": "n2", "cancelrun": "n2", "timeout": "n2", "excl": "n1"}
DUPLICATE_RULE = 24 * 3600
ASTRAY = "held another's stop (cc-backend 1.5.4's stop/commit race), said by the daemon"
_STRAY = re.compile(r"It applied them to other jobs, which now show: ([^(]*) \(")
# the daemon's line for a run it could not replace (README, Troubleshooting); a replaced
# run is counted as cc-backend holds it now
_ASTRAY = re.compile(r"cc-backend held job (\d+) \(\S+, start (\d+)\) [^\n]*: another run's stop "
                     r"was applied to it [^\n]*; correct it in cc-backend")


@dataclass
class Verdict:
    checked: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    exceptions: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)


def expected(workload: Workload, poisoned: int, broken: int
             ) -> tuple[dict[tuple[int, int], Run], list[tuple[Run, Run]], Counter[str]]:
    """The runs cc-backend must hold, by (job id, start); the pairs of runs of a job
    requeued within a day, one of which it must hold; the exceptions by name."""
    want: dict[tuple[int, int], Run] = {}
    pairs: list[tuple[Run, Run]] = []
    exceptions: Counter[str] = Counter()
    for runs in workload.by_id.values():
        first = next((r for r in runs if r.first_of_requeue), None)
        for run in runs:
            if not run.ran:
                continue
            if run.het_leader and run.het_offset:
                exceptions["het component (one job in cc-backend)"] += 1
            elif run.job_id in (poisoned, broken):
                exceptions["record Slurm cannot print or ccadapter cannot read"] += 1
            elif first is not None and run is not first and \
                    run.start - first.start < DUPLICATE_RULE:
                pairs.append((first, run))
            else:
                want[(run.job_id, run.start)] = run
    for first, _ in pairs:  # held as one of its pair, not on its own
        want.pop((first.job_id, first.start), None)
    return want, pairs, exceptions


def check(jobs: list[dict[str, Any]], workload: Workload, poisoned: int = 0,
          broken: int = 0, said_astray: set[tuple[int, int]] | None = None,
          said_stray: set[tuple[str, int]] | None = None) -> Verdict:
    """``said_astray``: the runs the daemon said cc-backend holds stopped by another's
    stop and it could not replace (:func:`astray`; README, "cc-backend held job N ...
    another run's stop was applied to it ...; correct it in cc-backend"): wrong in
    cc-backend by its stop/commit race; counted as that exception, not as wrong. A run the
    daemon replaced is counted as cc-backend holds it now. ``said_stray``: the (state,
    duration) each lost stop left on the job it was applied to, as the daemon said them
    (:func:`stray_stops`): a wrong run showing one of them is that exception too (the REST
    API cannot tell which job a stop went to; the daemon says what to look for)."""
    want, pairs, exceptions = expected(workload, poisoned, broken)
    v = Verdict(checked=len(want) + len(pairs), exceptions=exceptions)
    held: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for job in jobs:
        held.setdefault((job["jobId"], job["startTime"]), []).append(job)
    for first, later in pairs:
        got = [r for r in (first, later) if (r.job_id, r.start) in held]
        if not got:
            v.lost += 1
            v.problems.append(f"job {first.job_id}: neither of its runs within 24 h held")
            continue
        if len(got) == 1:
            v.exceptions["requeued run within 24 h (in the held run's metaData)"] += 1
        for run in got:
            want[(run.job_id, run.start)] = run
    for key, run in want.items():
        got_jobs = held.get(key, [])
        if not got_jobs:
            v.lost += 1
            v.problems.append(f"job {key[0]} (start {key[1]}, {run.kind}): not held")
            continue
        if len(got_jobs) > 1:
            v.duplicated += 1
            v.problems.append(f"job {key[0]}: held {len(got_jobs)} times")
        wrong = _differences(got_jobs[0], run)
        shows = (got_jobs[0]["jobState"], got_jobs[0]["duration"])
        if wrong and (key in (said_astray or set()) or shows in (said_stray or set())):
            v.exceptions[ASTRAY] += 1
            v.problems.append(f"job {key[0]} ({run.kind}, said by the daemon): "
                              f"{'; '.join(wrong)}")
        elif wrong:
            v.wrong += 1
            v.problems.append(f"job {key[0]} ({run.kind}): {'; '.join(wrong)}")
    ran = {(r.job_id, r.start) for rs in workload.by_id.values() for r in rs if r.ran}
    for key, got_jobs in held.items():
        if key not in want and key not in ran:
            v.duplicated += len(got_jobs)
            v.problems.append(f"job {key[0]}: a run starting {key[1]} Slurm never had")
    return v


def _differences(job: dict[str, Any], run: Run) -> list[str]:
    out = []
    # a requeued run's state in cc-backend is the product's choice (README)
    state = None if run.first_of_requeue else CC_STATE[run.state]
    if state and job.get("jobState") != state:
        out.append(f"jobState {job.get('jobState')!r} != {state!r}")
    if job.get("duration") != run.end - run.start:
        out.append(f"duration {job.get('duration')} != {run.end - run.start}")
    if (job.get("arrayJobId") or 0) != run.array_job_id:
        out.append(f"arrayJobId {job.get('arrayJobId')} != {run.array_job_id}")
    hosts = sorted(r.get("hostname") for r in job.get("resources") or [])
    expect = sorted(hostlist.expand_hostlist(NODES[run.kind]))
    if hosts != expect:
        out.append(f"hosts {hosts} != {expect}")
    return out


def astray(log_text: str) -> set[tuple[int, int]]:
    """The runs the daemon's log says cc-backend holds stopped by another's stop."""
    return {(int(m[1]), int(m[2])) for m in _ASTRAY.finditer(log_text)}


def stray_stops(log_text: str) -> set[tuple[str, int]]:
    """(state, duration) of each stop the daemon's log says cc-backend applied to another
    job (lost-stops: "It applied them to other jobs, which now show: completed 882 s, ...")."""
    return {(m[1], int(m[2])) for line in _STRAY.finditer(log_text)
            for m in re.finditer(r"(\w+) (\d+) s", line[1])}
