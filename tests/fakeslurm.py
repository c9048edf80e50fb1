"""A Slurm cluster for unit tests, answering the collector's commands from recorded outputs.

What is recorded (``tests/fixtures/<version>/``, captured from the real test bed) is the JSON
of every run of a workload (``sacct --json``), slurmctld's ``scontrol show job -d`` text of the
jobs it held, and the node list. The collector asks narrower questions than those recordings
(the run listing of a window, the JSON of a few job ids, one scontrol process answering many
commands); :class:`RecordedSlurm` answers each the way the real commands select and print:

- the listing (``sacct -X -n -P ... -o JobIDRaw,JobID,Start,End,State,NodeList``) writes one
  line per recorded run that matches slurmdbd's rule for the window (``-s RUNNING``:
  started before the window's end, ended after its start or not yet; without ``-s``: eligible
  before its end and not ended before its start) or the id list (``--jobs``), with epoch times
  as ``SLURM_TIME_FORMAT=%s`` prints them, and JobID as sacct names a het job's component
  (``11+1``), an array task (``10_3``) or a job (``12``). The listing's text form itself is
  tested on real recorded listings (``tests/fixtures/*/testbed/commands-*.json``).
- ``sacct --json -j IDS``: the recorded document with the records of those ids (for a het
  job's leader, every component, as sacct answers);
- ``scontrol -d`` reading commands: the recorded record of each ``show job ID`` (every
  component's for a het job's leader; an error on stderr for jobs it does not hold), the
  script of each ``write batch_script ID -``, the argument of ``show hostnames``, each
  command echoed as scontrol echoes it; with ``SLURM_TIME_FORMAT=%s`` the recorded
  wall-clock times (UTC) printed as epochs;
- ``scontrol -d show job``: the whole recorded text, line by line;
- ``squeue -s`` (the jobs that run now): a step per running job of that text or of the
  recorded runs.

Switches: ``sacct_down``/``controller_down`` (the daemons unreachable), ``controller``
(the scontrol text, e.g. busy or final), ``scripts`` (slurmdbd's stored scripts, by id).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from ccadapter.errors import SlurmCommandError, TransientSlurmError
from ccadapter.slurm.runner import Completed
from tests.conftest import fixture_json, fixture_text

RELEASE = {"22.05": "22.05.8", "23.02": "23.02.8", "23.11": "23.11.11", "24.05": "24.05.8",
           "24.11": "24.11.5", "25.05": "25.05.8", "25.11": "25.11.7", "26.05": "26.05.5"}
_WALL = re.compile(r"(?<==)(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b")
_NO_VAL = 0xFFFFFFFE
# sacct's state names and the short forms `sacct -s` takes (ccadapter.slurm.formats.listing.ENDED)
_ENDED = {"BOOT_FAIL": "BF", "CANCELLED": "CA", "COMPLETED": "CD", "DEADLINE": "DL",
          "FAILED": "F", "NODE_FAIL": "NF", "OUT_OF_MEMORY": "OOM", "PREEMPTED": "PR",
          "REQUEUED": "RQ", "RESIZING": "RS", "REVOKED": "RV", "TIMEOUT": "TO"}


def recorded_clock(version: str) -> Callable[[], float]:
    """A wall clock that runs from the moment the recording of ``version`` ended.

    The recordings are dated: a command replaying them at today's time finds its windows
    more than slurmQueryMaxSpan after them once the recording is a week old (a time bomb
    that failed CI 7 days after the 24.11 recording). Run at the recording's time, moving."""
    shift = time.time() - fixture_json(version, "testbed/commands-final.json")["now"]
    return lambda: time.time() - shift


def _num(value: Any) -> int:
    if isinstance(value, Mapping):
        return int(value.get("number") or 0) if value.get("set") else 0
    return int(value or 0)


def _epoch(value: Any) -> int:
    num = _num(value)
    return 0 if num <= 0 or num >= _NO_VAL else num


def _state(record: Mapping[str, Any]) -> str:
    current = record.get("state", {}).get("current", "")
    return current[0] if isinstance(current, list) and current else str(current)


def _het_leader(record: Mapping[str, Any]) -> int:
    """The leader's id of a het job's component (0 for other jobs; ``het`` may be unset)."""
    het = record.get("het") or {}
    offset = het.get("job_offset")
    unset = offset is None or (isinstance(offset, Mapping) and not offset.get("set"))
    return 0 if unset else _num(het.get("job_id"))


def job_id_text(record: Mapping[str, Any]) -> str:
    """sacct's JobID: ``11+1`` for a het job's component, ``10_3`` for an array task."""
    leader = _het_leader(record)
    if leader:
        return f"{leader}+{_num(record['het']['job_offset'])}"
    task = record.get("array", {}).get("task_id")
    if task is not None and (not isinstance(task, Mapping) or task.get("set")):
        return f"{_num(record['array']['job_id'])}_{_num(task)}"
    return str(record.get("job_id"))


def _shown(held: Mapping[int, str], job_id: int) -> list[str]:
    """The records ``scontrol show job ID`` prints: a het job's leader prints every
    component, leader first (as recorded: tests/fixtures/*/testbed/commands-*.json)."""
    record = held.get(job_id)
    if record is None or f"HetJobId={job_id} HetJobOffset=0 " not in record:
        return [record] if record else []
    return [r for r in held.values() if f" HetJobId={job_id} " in r.split("\n", 1)[0]]


class RecordedSlurm:
    """A CommandRunner over recorded outputs of one cluster (see the module docstring)."""

    def __init__(self, version: str, sacct: str | dict, controller: str = "", *,
                 scripts: Mapping[int, str] | None = None,
                 controller_script: Callable[[int], str] | None = None,
                 nodes: str = "", clock: Callable[[], float] | None = None,
                 listing: dict | None = None, json_text: str | None = None,
                 zone: tzinfo = UTC) -> None:
        """``listing``: the runs slurmdbd holds, when the JSON it prints (``sacct``) is
        deliberately broken; ``json_text``: a raw answer to every ``--json`` query.
        ``zone``: where Slurm's commands run (another host, a chroot without
        /etc/localtime): sacct reads ``--starttime``/``--endtime`` in it, unless the
        command's environment sets ``TZ``."""
        self.version = version
        self.doc = json.loads(sacct) if isinstance(sacct, str) else sacct
        self.listed = listing if listing is not None else self.doc
        self.json_text = json_text
        self.controller = controller
        self.scripts = dict(scripts or {})
        self.controller_script = controller_script or (lambda job_id: "#!/bin/sh\n# from "
                                                       "slurmctld\n")
        self.nodes = nodes
        # what `scontrol show config` prints besides ClusterName; nothing by default: a
        # config that says nothing of booting nodes, read as "nodes may boot"
        self.config = ""
        self.clock = clock or (lambda: 4e9)
        self.zone = zone
        self.sacct_down = False
        self.held_jobs: int | None = None  # sdiag's pending count, where a test sets it
        self.controller_down = False
        # job ids whose slurmdbd record breaks `sacct --json` for every batch naming them:
        # it exits 1 ("exit") or prints JSON cut short ("cut")
        self.poison: set[int] = set()
        self.poison_how = "exit"
        self.calls: Counter[str] = Counter()
        self.argvs: list[list[str]] = []
        self.stdins: list[str] = []
        self._counting = threading.Lock()  # the fast path asks from several threads at once

    # --- the CommandRunner protocol ---------------------------------------------------------

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        argv = list(argv)
        self._count(argv)
        if argv[0] == "sacct":
            if self.sacct_down:
                raise TransientSlurmError(argv, "exit code 1",
                                          "sacct: error: Problem talking to the database: "
                                          "Connection refused")
            if argv[1:] == ["-V"]:
                return f"slurm {RELEASE.get(self.version, self.version)}\n"
            if "-P" in argv:
                assert env is not None and env["SLURM_TIME_FORMAT"] == "%s", env
                return self._listing(argv, env)
            return self._json(argv)
        if argv[0] == "squeue":
            if self.controller_down:
                raise TransientSlurmError(argv, "exit code 1",
                                          "slurm_load_jobs error: Unable to contact slurm "
                                          "controller (connect failure)")
            assert argv[1:5] == ["--all", "-h", "-s", "-O"], argv
            return self._steps(env)
        if argv[0] == "sdiag":
            if self.controller_down:
                raise TransientSlurmError(argv, "exit code 1",
                                          "slurm_get_statistics: Unable to contact slurm "
                                          "controller (connect failure)")
            return self._sdiag(env)
        if argv[0] == "scontrol":
            if self.controller_down:
                raise TransientSlurmError(argv, "exit code 1",
                                          "Unable to contact slurm controller")
            if argv[-2:] == ["show", "config"]:
                return f"ClusterName             = {self.cluster}\n{self.config}"
            if argv[-3:] == ["-o", "show", "node"]:
                return self.nodes
        raise AssertionError(f"unexpected command {argv}")

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None,
                  env: Mapping[str, str] | None = None) -> Completed:
        argv = list(argv)
        self._count(argv)
        assert argv[0] == "scontrol" and argv[-1] == "-d" and stdin is not None, argv
        self.stdins.append(stdin)
        held = self._held(env)
        out, err = [], []
        for command in stdin.splitlines():
            out.append(f"scontrol: {command}\n")
            words = command.split()
            if words[:2] == ["show", "hostnames"]:  # answered without slurmctld
                out.append(words[2] + "\n")
            elif self.controller_down:
                err.append("slurm_load_jobs error: Unable to contact slurm controller "
                           "(connect failure)\n")
            elif words[:2] == ["show", "job"]:
                records = _shown(held, int(words[2]))
                if not records:
                    err.append("slurm_load_jobs error: Invalid job id specified\n")
                else:
                    out.extend(record + "\n\n" for record in records)
            elif words[:2] == ["write", "batch_script"]:
                record = held.get(int(words[2]))
                if record is None or "BatchFlag=1" not in record:
                    err.append("job script retrieval failed: Invalid job id specified\n")
                else:
                    out.append(self.controller_script(int(words[2])))
            else:
                raise AssertionError(f"unexpected scontrol command {command!r}")
        out.append("scontrol: ")
        return Completed("".join(out), "".join(err), 1 if err else 0)

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed:
        """As a long-lived scontrol answers: like :meth:`unchecked`."""
        return self.unchecked(argv, stdin=stdin, timeout=timeout, env=env)

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]:
        argv = list(argv)
        self._count(argv)
        assert argv[0] == "scontrol" and argv[-3:] == ["-d", "show", "job"], argv
        if self.controller_down:
            raise TransientSlurmError(argv, "exit code 1", "Unable to contact slurm controller")
        yield from (line + "\n" for line in self.controller_text(env).splitlines())

    # --- answers ------------------------------------------------------------------------------

    def _sdiag(self, env: Mapping[str, str] | None) -> str:
        """The release's recorded sdiag, its job counts those of the controller's text (or
        ``held_jobs`` pending, when a test sets it)."""
        text = fixture_text(self.version, "sdiag.txt")
        states = re.findall(r"JobState=(\w+)", self.controller_text(env))
        held = self.held_jobs
        pending = held if held is not None else sum(s == "PENDING" for s in states)
        running = 0 if held is not None else len(states) - pending
        text = re.sub(r"Jobs pending:\s+\d+", f"Jobs pending:   {pending}", text)
        return re.sub(r"Jobs running:\s+\d+", f"Jobs running:   {running}", text)

    @property
    def cluster(self) -> str:
        return self.doc["jobs"][0].get("cluster", "cluster") if self.doc["jobs"] else "cluster"

    def _count(self, argv: list[str]) -> None:
        with self._counting:
            self.calls[argv[0]] += 1
            self.argvs.append(argv)

    def controller_text(self, env: Mapping[str, str] | None) -> str:
        """The recorded text (wall-clock times, recorded in UTC), with times as epochs when
        asked with ``SLURM_TIME_FORMAT=%s``, as scontrol prints them then."""
        if (env or {}).get("SLURM_TIME_FORMAT") != "%s":
            return self.controller
        return _WALL.sub(lambda m: str(int(datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S")
                                           .replace(tzinfo=UTC).timestamp())), self.controller)

    def _held(self, env: Mapping[str, str] | None = None) -> dict[int, str]:
        held = {}
        for record in self.controller_text(env).split("\n\n"):
            record = record.strip("\n")
            if record.startswith("JobId="):
                held[int(record[6:].split(" ", 1)[0])] = record
        return held

    def _steps(self, env: Mapping[str, str] | None) -> str:
        """``squeue -s -O JobId:|,StepId:|``: a batch step per job that runs, in slurmctld's
        text or in slurmdbd's records (tests make a recorded run run by editing either); a
        het job's component's step named ``LEADER+OFFSET.0``, as squeue names it."""
        steps = {}
        for job_id, record in self._held(env).items():
            het = re.search(r" HetJobId=(\d+) HetJobOffset=(\d+)", record.split("\n", 1)[0])
            if re.search(r"\bJobState=(RUNNING|SUSPENDED)\b", record):
                steps[job_id] = f"{het[1]}+{het[2]}.0" if het and het[2] != "0" \
                    else f"{job_id}.batch"
        for r in self.listed["jobs"]:
            t = r.get("time", {}) if isinstance(r, Mapping) else {}
            if _state(r) in ("RUNNING", "SUSPENDED") and _epoch(t.get("start")) \
                    and not _epoch(t.get("end")):
                leader = _het_leader(r)
                steps[r["job_id"]] = f"{leader}+{_num(r['het']['job_offset'])}.0" \
                    if leader and leader != r["job_id"] else f"{r['job_id']}.batch"
        return "".join(f"{job_id}|{step}|\n" for job_id, step in sorted(steps.items()))

    def _records(self, argv: list[str], doc: dict, env: Mapping[str, str] | None = None
                 ) -> list[dict]:
        if "--jobs" in argv:
            ids = {int(i) for i in argv[argv.index("--jobs") + 1].split(",")}
            # records without a readable id (broken on purpose) are printed in any answer
            return [r for r in doc["jobs"] if not isinstance(r, Mapping)
                    or not isinstance(r.get("job_id"), int) or r["job_id"] in ids
                    or _het_leader(r) in ids]
        zone = self._zone(env)
        start, end = self._bound(argv, "--starttime", zone), self._bound(argv, "--endtime", zone)
        if start > end:  # as sacct refuses it, exit code 1
            raise SlurmCommandError(argv, "exit code 1", "sacct: error: Start time "
                                    f"({argv[argv.index('--starttime') + 1]}) requested is "
                                    "after end time")
        out = []
        for r in doc["jobs"]:
            t = r.get("time", {})
            t_start, t_end = _epoch(t.get("start")), _epoch(t.get("end"))
            states = argv[argv.index("-s") + 1] if "-s" in argv else None
            if states == "RUNNING":  # slurmdbd's rules (_state_time_string())
                hit = t_start and (start < t_end or (not t_end and _state(r) == "RUNNING")) \
                    and end > t_start
            elif states:  # ended states: ended during the window, in one of those states
                allocated = r.get("nodes") not in (None, "", "None assigned")
                hit = _ENDED.get(_state(r)) in states.split(",") and start <= t_end <= end \
                    and ("--nnodes" not in argv or allocated)
            else:
                eligible = _epoch(t.get("eligible"))
                hit = eligible and eligible < end and (t_end >= start or not t_end)
            if hit:
                out.append(r)
        return out

    def _zone(self, env: Mapping[str, str] | None) -> tzinfo:
        """The zone sacct reads wall-clock times in: ``TZ`` of its environment, else
        where it runs."""
        name = (env or {}).get("TZ")
        if name is None:
            return self.zone
        return UTC if name.lstrip(":") in ("UTC0", "UTC", "") else ZoneInfo(name.lstrip(":"))

    def _bound(self, argv: list[str], flag: str, zone: tzinfo = UTC) -> float:
        text = argv[argv.index(flag) + 1]
        if text == "now":
            return self.clock()
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=zone).timestamp()

    def _listing(self, argv: list[str], env: Mapping[str, str] | None = None) -> str:
        lines = []
        for r in self._records(argv, self.listed, env):
            t = r.get("time", {})
            start, end = _epoch(t.get("start")), _epoch(t.get("end"))
            nodes = r.get("nodes") or "None assigned"
            lines.append(f"{r.get('job_id')}|{job_id_text(r)}|{start or 'Unknown'}|"
                         f"{end or 'Unknown'}|{_state(r)}|{nodes}")
        return "".join(line + "\n" for line in lines)

    def _json(self, argv: list[str]) -> str:
        if self.json_text is not None:
            return self.json_text
        doc = copy.copy(self.doc)
        records = self._records(argv, self.doc)
        bad = {_num(r.get("job_id")) for r in records if isinstance(r, Mapping)} & self.poison
        if bad and self.poison_how == "exit":
            raise SlurmCommandError(argv, "exit code 1", "sacct: error: slurmdb_jobs_get: "
                                    f"unpack error for job {min(bad)}")
        if bad:  # printed, then cut short where the record broke the writer
            return json.dumps(doc)[:200]
        if "-B" in argv and self.scripts:
            records = [dict(r, script=self.scripts[_num(r.get("job_id"))])
                       if _num(r.get("job_id")) in self.scripts else r for r in records]
        doc["jobs"] = records
        return json.dumps(doc)
