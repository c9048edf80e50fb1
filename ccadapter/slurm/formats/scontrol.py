"""``scontrol show job -d`` text, and several scontrol commands answered by one process.

The text is the same from 22.05 to 26.05 in the parts we read (the ``Nodes=.. CPU_IDs=..
Mem=.. GRES=..`` detail lines, ``JobState``, ``StartTime``, ``OverSubscribe``); 26.05 adds
``Exclusive=`` beside ``OverSubscribe=`` and a ``SLUID=`` line, and 24.11+ print
``ArrayJobId=``/``ArrayTaskId=`` on the first line, before ``JobName=``. It is the one source of
exact CPU ids on every version (22.05's scontrol has no --json, and the JSON core bitmaps lose
hyper-threads), so it is parsed here, once.

A heterogeneous job's component has ``HetJobId=`` and ``HetJobOffset=`` on its first line and
a ``HetJobIdSet=`` line, the same on every version: ``JobId=12 HetJobId=11 HetJobOffset=1
JobName=..``. ``show job 11`` (the leader) prints every component's record, ``show job 12``
that component's only; so a record is kept when its id or its ``HetJobId`` is wanted.

Cost: a record is read in one pass over its lines (``key=value`` tokens split once), never one
regular-expression search per key; and a dump of every job slurmctld holds is filtered by the
``JobId=`` at the head of each record before anything else of it is read, so reading the few
jobs a cycle needs out of 50,000 costs a scan, not a parse.

One process, many jobs: scontrol reads commands from standard input when it has no command
on its command line (``scontrol -d`` then ``show job 5``, ``write batch_script 5 -``, ... one
per line). Each command is followed by ``show hostnames MARKER-k``, which prints its argument
back without asking slurmctld; the random marker cuts the output into one answer per command
even when a batch script holds text that looks like scontrol's own. scontrol echoes every
command it reads (``scontrol: show job 5``) when its input is not a terminal; the echo is
removed. Seen the same on 22.05, 24.11 and 26.05 (``tests/fixtures/*/scontrol-batch-*``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from ccadapter.errors import SlurmParseError
from ccadapter.slurm.formats.records import ControllerJob, NodeAlloc, ParseContext
from ccadapter.slurm.formats.values import (
    decimal,
    expand_hostlist,
    gpu_indices,
    int_ranges,
    shared_from_flags,
    slurm_duration,
)

# Lines whose whole rest is one value, spaces included (paths, the submit line, comments).
_WHOLE_LINE = frozenset({"Command", "WorkDir", "StdErr", "StdIn", "StdOut", "SubmitLine",
                         "Comment", "AdminComment", "SystemComment", "Extra", "Power",
                         "MailUser", "Container", "ContainerID"})
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
ECHO = "scontrol: "


# --- records ---------------------------------------------------------------------------------


def iter_records(lines: Iterable[str], wanted: Collection[int] | None = None
                 ) -> Iterator[tuple[int | None, str]]:
    """(job id, record text) of each record of ``scontrol show job`` output, in order.

    A record starts with ``JobId=`` at the beginning of a line that follows a blank line (or
    the start); records whose id is not in ``wanted`` are skipped without being kept, so a
    dump of every job costs a scan of its lines. A record whose head has no readable id is
    yielded with id None (the caller reports it), unless ``wanted`` is given."""
    current: list[str] | None = None
    current_id: int | None = None
    after_blank = True
    for raw in lines:
        line = raw.rstrip("\n")
        if current is None and line.startswith("CLUSTER: "):
            continue  # the header of each cluster's part with --clusters
        if not line.strip():
            if current is not None:
                yield current_id, "\n".join(current).strip("\n")
                current = None
            after_blank = True
            continue
        if after_blank and line.startswith("JobId="):
            if current is not None:
                yield current_id, "\n".join(current).strip("\n")
            current_id = decimal(line[6:].split(" ", 1)[0])
            keep = wanted is None or (current_id is not None and current_id in wanted) \
                or _het_job_id(line) in wanted
            current = [line] if keep else None
        elif current is not None:
            current.append(line)
        elif after_blank and wanted is None and "No jobs in the system" not in line:
            current, current_id = [line], None  # a record without a JobId head
        after_blank = False
    if current is not None:
        yield current_id, "\n".join(current).strip("\n")


def _het_job_id(head: str) -> int | None:
    """``HetJobId=`` of a record's first line (``JobId=12 HetJobId=11 HetJobOffset=1
    JobName=..``); None for a job that is no het job's component."""
    at = head.find(" HetJobId=")
    name = head.find(" JobName=")
    if at < 0 or 0 <= name < at:
        return None
    return decimal(head[at + 10:].split(" ", 1)[0])


def record_fields(record: str) -> tuple[dict[str, str], list[str], str]:
    """One pass over a record: its ``key=value`` fields (first occurrence wins), its detail
    lines (``Nodes=.. CPU_IDs=..``), and the job name (the rest of the first line after
    ``JobName=``, which may hold spaces and ``=``)."""
    fields: dict[str, str] = {}
    details: list[str] = []
    name = ""
    for number, line in enumerate(record.split("\n")):
        stripped = line.strip()
        if number == 0:
            head, sep, name = stripped.partition(" JobName=")
            if not sep and stripped.startswith("JobName="):
                head, name = "", stripped[8:]
            _tokens(head, fields)
            continue
        key, _, rest = stripped.partition("=")
        if key in _WHOLE_LINE:
            fields.setdefault(key, rest)
        elif key == "Nodes" and line.startswith("     "):
            details.append(stripped)
        else:
            _tokens(stripped, fields)
    return fields, details, name


def _tokens(text: str, fields: dict[str, str]) -> None:
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value


def parse_scontrol_jobs(out: str | Iterable[str], ctx: ParseContext,
                        wanted: Collection[int] | None = None,
                        ) -> tuple[dict[int, ControllerJob], list[str]]:
    """Jobs of ``scontrol show job -d`` output (text or lines); a bad record is an error
    string, never a failure of the whole answer. With ``wanted``, other jobs are skipped
    unread."""
    # "\n" alone ends a line: a name or comment may hold what str.splitlines also splits
    # at (U+0085, U+2028, ...)
    lines = out.split("\n") if isinstance(out, str) else out
    jobs: dict[int, ControllerJob] = {}
    errors: list[str] = []
    for job_id, record in iter_records(lines, wanted):
        if job_id is None:
            errors.append(str(ctx.error(f"record without JobId: {record[:80]!r}")))
            continue
        try:
            jobs[job_id] = controller_job_from_text(job_id, record, ctx.for_job(job_id))
        except SlurmParseError as exc:  # already names version, command and job
            errors.append(str(exc))
        except ValueError as exc:
            errors.append(str(ctx.for_job(job_id).error(str(exc))))
    return jobs, errors


def controller_job_from_text(job_id: int, record: str, ctx: ParseContext) -> ControllerJob:
    fields, details, name = record_fields(record)
    nodes: list[NodeAlloc] = []
    for line in details:
        alloc = dict(t.partition("=")[::2] for t in line.split())
        cpus = alloc.get("CPU_IDs", "")
        for host in expand_hostlist(alloc.get("Nodes", ""), ctx):
            nodes.append(NodeAlloc(host, int_ranges(cpus) if cpus else (),
                                   gpu_indices(alloc.get("GRES", ""))))
    tres = fields.get("AllocTRES") or fields.get("TRES") or ""
    gpu = _TRES_GPU.search(tres)
    het_job_id = decimal(fields.get("HetJobId", "")) or 0
    het_offset = decimal(fields.get("HetJobOffset", ""))
    return ControllerJob(
        job_id=job_id,
        state=fields.get("JobState", ""),
        start_time=fields.get("StartTime", ""),
        batch=fields.get("BatchFlag") == "1",
        shared=shared_from_flags(fields.get("OverSubscribe"), fields.get("Exclusive")),
        nodes=tuple(nodes),
        text=record.strip(),
        name=name,
        user=_owner(fields.get("UserId")),
        group=_owner(fields.get("GroupId")),
        account=fields.get("Account", ""),
        partition=fields.get("Partition", ""),
        submit_time=fields.get("SubmitTime", ""),
        end_time=fields.get("EndTime", ""),
        time_limit=slurm_duration(fields.get("TimeLimit", "")),
        num_cpus=int(fields.get("NumCPUs") or 0),
        array_job_id=int(fields.get("ArrayJobId") or 0),
        array_task_id=decimal(fields.get("ArrayTaskId", "")),
        exit_code=decimal(fields.get("ExitCode", "").split(":")[0]),
        gpus=int(gpu[1]) if gpu else None,
        het_job_id=het_job_id if het_offset is not None else 0,
        het_offset=het_offset if het_job_id else None,
        reboot=fields.get("Reboot", "0") not in ("0", ""),
        restarts=decimal(fields.get("Restarts", "")) or 0,
        resized=fields.get("ResizeTime", "None") not in ("None", "Unknown", ""),
    )


def _owner(value: str | None) -> str:
    """``root(0)`` -> ``root``."""
    return (value or "").split("(", 1)[0]


# --- one scontrol process, many commands -----------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Commands for one ``scontrol -d`` process reading its standard input."""

    commands: tuple[str, ...]
    marker: str

    @classmethod
    def of(cls, commands: Iterable[str], marker: str | None = None) -> Batch:
        return cls(tuple(commands), marker or f"ccadapter-{secrets.token_hex(8)}")

    def stdin(self) -> str:
        lines = []
        for k, command in enumerate(self.commands):
            lines += [command, f"show hostnames {self.marker}-{k}"]
        return "\n".join(lines) + "\n"

    def answers(self, out: str) -> list[str | None]:
        """The output of each command, in order; None for commands after the process
        stopped early (a fatal error ends scontrol). The marker is found with its echo when
        scontrol echoes, else alone; an answer without a final newline (a batch script) runs
        into what follows on the same line, so neither is looked for at a line start."""
        answers: list[str | None] = []
        pos = 0
        for k, command in enumerate(self.commands):
            tag = f"{self.marker}-{k}\n"
            echoed = f"{ECHO}show hostnames {tag}{tag}"
            at = out.find(echoed, pos)
            end = at + len(echoed)
            if at < 0:
                at = _find_unechoed(out, tag, pos)
                end = at + len(tag)
            if at < 0:
                answers += [None] * (len(self.commands) - k)
                break
            # a long-lived process (SlurmRunner.ask) may print its prompt in one answer and
            # the echo of the next command in the next: each is taken off where it is
            answers.append(out[pos:at].removeprefix(ECHO).removeprefix(f"{command}\n"))
            pos = end
        return answers


    def complete(self, out: str) -> bool:
        """Has a process still reading its input answered every command (the last
        marker's own output is there)?"""
        if not self.commands:
            return True
        tag = f"{self.marker}-{len(self.commands) - 1}\n"
        at = out.rfind(tag)
        echo = f"{ECHO}show hostnames "
        return at >= 0 and out[max(0, at - len(echo)):at] != echo


def _find_unechoed(out: str, tag: str, pos: int) -> int:
    """Where the marker's own output starts, not its echo (the echo alone, without the
    output after it, means the process ended there)."""
    echo = f"{ECHO}show hostnames "
    while (at := out.find(tag, pos)) >= 0 and out[max(0, at - len(echo)):at] == echo:
        pos = at + 1
    return at


def show_job(job_id: int) -> str:
    return f"show job {job_id}"


def write_script(job_id: int) -> str:
    return f"write batch_script {job_id} -"
