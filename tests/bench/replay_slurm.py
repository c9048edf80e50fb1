"""A replayed Slurm for the pipeline benchmark: ``ccadapter daemon`` runs its Slurm commands
through it (``slurmCommandPrefix: [python, -m, tests.bench.replay_slurm, DIR]``).

DIR holds what :func:`tests.bench.delivery.write_backlog` prepared from the recorded 24.11
test-bed jobs: ``window-NNN.json`` (sacct answers), the same as ``records-NNN.jsonl`` (a record
per line, ``records-NNN.at``: where each line starts) and ``listing-NNN.txt``, and
``controller-NNN.txt`` (the ``scontrol show job -d`` answer for the same jobs), ``empty.json``
and ``cluster``. Each listing of ended runs (``sacct -P -s BF,CA,CD,... --starttime``, what a
window and its slices ask: :data:`~ccadapter.slurm.formats.listing.ENDED`) or of runs that ran
(``-s RUNNING``, what ``backfill`` asks) hands out the next chunk (the backlog's runs ended
minutes ago), so that the daemon enqueues the backlog through its own path (the listing,
``sacct --json -j`` of the runs new to it, one scontrol process for their allocations, the
parser, the outbox) over a few cycles; once all are handed out, listings are empty. Nothing
runs: slurmctld's step list (``squeue -s``) is empty. Questions by job id are answered from the
chunks handed out (tests.fakeslurm answers them as the real commands select). ``served`` counts
the chunks handed out (under a lock: two reconcilers may ask at once). A command it has no
answer for fails with ``replay_slurm: no answer for ...``, which the daemon logs
(tests.bench.delivery stops the run on it).

The replayed Slurm is meant to cost little beside the daemon, as slurmdbd answering 190 ids
by index does, so that the enqueue figure is the daemon's: a question by job id is answered
from ``records-NNN.jsonl`` and ``listing-NNN.txt`` (job ids are FIRST_ID + index: a run's
line is known without decoding the chunk), and the answers that need no more import
neither ccadapter nor tests.fakeslurm (a process per sacct call: its start-up is most of
its cost). What it prints is what tests.fakeslurm.RecordedSlurm
prints for the same records (tests/unit/test_bench_replay.py).

    python -m tests.bench.replay_slurm DIR sacct --json ...
"""

from __future__ import annotations

import fcntl
import json
import sys
import time
from pathlib import Path
from typing import TextIO

FIRST_ID = 1_000_000  # tests.bench.delivery.write_backlog numbers the jobs from here


def _next_chunk(base: Path) -> int | None:
    """The number of the chunk handed out now, None once all are."""
    with (base / "served.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        served = _served_count(base)
        if not (base / f"window-{served:03d}.json").exists():
            return None
        (base / "served").write_text(str(served + 1))
        return served


def _served_count(base: Path) -> int:
    counter = base / "served"
    return int(counter.read_text()) if counter.exists() else 0


def _served_chunks(base: Path, ids: set[int]) -> list[int]:
    """The chunks handed out so far that hold these job ids (ids are FIRST_ID + the job's
    index: its chunk is known without reading)."""
    served, size = _served_count(base), int((base / "chunk_jobs").read_text())
    return sorted({c for i in ids if i >= FIRST_ID and (c := (i - FIRST_ID) // size) < served})


def _served(base: Path, ids: set[int]) -> tuple[dict, str]:
    """The sacct records and the scontrol text of the chunks handed out that hold these
    job ids."""
    doc = json.loads((base / "empty.json").read_text())
    ctl = []
    for n in _served_chunks(base, ids):
        doc["jobs"] += json.loads((base / f"window-{n:03d}.json").read_text())["jobs"]
        path = base / f"controller-{n:03d}.txt"
        if path.exists():
            ctl.append(path.read_text().strip("\n"))
    return doc, "\n\n".join(ctl) + "\n"


def listing_lines(doc: dict) -> str:
    """sacct -P's lines for every record of a chunk, in the listing's fields
    (JobIDRaw,JobID,Start,End,State,NodeList): the window lists what it handed out."""
    from tests.fakeslurm import job_id_text

    return "".join(f"{r['job_id']}|{job_id_text(r)}|{r['time']['start']}|{r['time']['end']}|"
                   f"{r['state']['current'][0]}|{r['nodes']}\n" for r in doc["jobs"])


def _by_id(base: Path, kind: str, ids: set[int]) -> list[str]:
    """The lines of ``kind`` (records: JSON, listing: sacct -P) of these job ids, from the
    chunks handed out, in job-id order. A record is read alone, at its offset
    (``records-NNN.at``: where each line starts): a chunk is some 20 MB."""
    size = int((base / "chunk_jobs").read_text())
    out: list[str] = []
    wanted = sorted(i for i in ids if i >= FIRST_ID)
    for chunk in _served_chunks(base, set(wanted)):
        places = [at for i in wanted if 0 <= (at := i - FIRST_ID - chunk * size) < size]
        if kind == "listing":
            lines = (base / f"listing-{chunk:03d}.txt").read_text().splitlines()
            out += [lines[at] for at in places if at < len(lines)]
            continue
        starts = list(map(int, (base / f"records-{chunk:03d}.at").read_text().split()))
        with (base / f"records-{chunk:03d}.jsonl").open("rb") as fh:
            for at in places:
                if at + 1 < len(starts):
                    fh.seek(starts[at])
                    out.append(fh.read(starts[at + 1] - starts[at]).decode().rstrip("\n"))
    return out


def _json_of(base: Path, records: list[str]) -> str:
    """``sacct --json``: the recorded document's meta with these records (JSON text)."""
    doc = json.loads((base / "empty.json").read_text())
    doc["jobs"] = ["\0"]
    return json.dumps(doc).replace('"\\u0000"', ", ".join(records))


def answer(base: Path, argv: list[str], stdin: str) -> tuple[str, int]:
    """(stdout, exit code) of one command of the daemon."""
    cmd = argv[0]
    if cmd == "env":  # env SLURM_TIME_FORMAT=%s sacct ...: epochs are what we print anyway
        return answer(base, argv[2:], stdin)
    if cmd == "sacct" and "-V" in argv:
        return "slurm 24.11.5\n", 0
    if cmd == "sacct" and "-P" in argv and "--starttime" in argv:
        from ccadapter.slurm.formats.listing import ENDED, RAN

        if "-s" not in argv or argv[argv.index("-s") + 1] not in (ENDED[1], RAN[1]):
            raise SystemExit(f"replay_slurm: no answer for {' '.join(argv)}: only the "
                             "listings of ended runs and of runs that ran are replayed")
        chunk = _next_chunk(base)
        return ("" if chunk is None else (base / f"listing-{chunk:03d}.txt").read_text()), 0
    if cmd == "squeue" and "-s" in argv:  # the step list: nothing runs
        return "", 0
    if cmd == "sacct" and "--jobs" in argv and "-B" not in argv:  # by id: see the docstring
        if "-P" in argv:
            return "".join(line + "\n" for line in _by_id(base, "listing", _ids(argv, ""))), 0
        return _json_of(base, _by_id(base, "records", _ids(argv, ""))), 0
    from tests.fakeslurm import RecordedSlurm

    doc, controller = _served(base, _ids(argv, stdin))
    slurm = RecordedSlurm("24.11", doc, controller, clock=time.time)
    if cmd == "sacct":  # by job ids: the listing of stale-jobs, the details of new runs
        return slurm.run(argv, env={"SLURM_TIME_FORMAT": "%s"} if "-P" in argv else None), 0
    if cmd == "scontrol" and "config" in argv:
        return (f"ClusterName             = {(base / 'cluster').read_text().strip()}\n"
                "SlurmUser               = root(0)\n"), 0
    if cmd == "scontrol":  # nodes: an idle cluster
        return "", 0
    if cmd == "sacctmgr":
        return "root|Administrator\n", 0
    raise SystemExit(f"replay_slurm: no answer for {' '.join(argv)}")


def _ids(argv: list[str], stdin: str) -> set[int]:
    """The job ids a command asks about (``--jobs A,B`` or ``show job A`` lines)."""
    ids = set(map(int, argv[argv.index("--jobs") + 1].split(","))) if "--jobs" in argv else set()
    for line in stdin.splitlines():
        words = line.split()
        if words[:2] in (["show", "job"], ["write", "batch_script"]) and len(words) >= 3:
            ids.add(int(words[2]))
    return ids


def serve_scontrol(base: Path, argv: list[str], stdin: TextIO, stdout: TextIO,
                   stderr: TextIO) -> int:
    """``scontrol -d`` reading its questions: each line is answered as soon as it is read,
    as the long-lived process of :meth:`~ccadapter.slurm.runner.SlurmRunner.ask` needs (its
    input stays open between questions), from the chunks handed out so far. A chunk's
    records are read once (it never changes once written)."""
    from tests.fakeslurm import RecordedSlurm

    records: dict[int, str] = {}  # job id -> its ``scontrol show job -d`` record
    loaded: set[int] = set()
    for line in stdin:
        ids = _ids([], line)
        for chunk in set(_served_chunks(base, ids)) - loaded:
            loaded.add(chunk)
            path = base / f"controller-{chunk:03d}.txt"
            for record in path.read_text().split("\n\n") if path.exists() else ():
                if record.strip().startswith("JobId="):
                    record = record.strip("\n")
                    records[int(record[6:].split(" ", 1)[0])] = record
        held = "\n\n".join(records[i] for i in sorted(ids) if i in records) + "\n"
        done = RecordedSlurm("24.11", {"jobs": []}, held, clock=time.time).unchecked(
            argv, stdin=line)
        stdout.write(done.stdout.removesuffix("scontrol: "))  # the prompt of the next line
        stdout.flush()
        stderr.write(done.stderr)
        stderr.flush()
    return 0


def main() -> int:
    base, argv = Path(sys.argv[1]), sys.argv[2:]
    command = argv[2:] if argv[:1] == ["env"] else argv
    if command[0] == "scontrol" and command[-1] == "-d":  # one process, many jobs
        return serve_scontrol(base, command, sys.stdin, sys.stdout, sys.stderr)
    stdin = "" if sys.stdin.isatty() else sys.stdin.read()
    out, code = answer(base, argv, stdin)
    sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
