"""A replayed Slurm for the pipeline benchmark: ``ccadapter daemon`` runs its Slurm commands
through it (``slurmCommandPrefix: [python, -m, tests.bench.replay_slurm, DIR]``).

DIR holds what :func:`tests.bench.delivery.write_backlog` prepared from the recorded 24.11
test-bed jobs: ``window-NNN.json`` (sacct answers) and ``controller-NNN.txt`` (the
``scontrol show job -d`` answer for the same jobs), ``empty.json`` and ``cluster``. Each sacct
window query hands out the next chunk, so that the daemon enqueues the backlog through its
own path (sacct JSON, parser, join with slurmctld's view, outbox) over a few cycles; once all
are handed out, windows are empty. ``served`` counts the chunks handed out (under a lock:
two reconcilers may ask at once).

    python -m tests.bench.replay_slurm DIR sacct --json ...
"""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path


def _next_chunk(base: Path) -> Path:
    with (base / "served.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counter = base / "served"
        served = int(counter.read_text()) if counter.exists() else 0
        chunk = base / f"window-{served:03d}.json"
        if not chunk.exists():
            return base / "empty.json"
        counter.write_text(str(served + 1))
        return chunk


def _last_controller(base: Path) -> str:
    counter = base / "served"
    served = int(counter.read_text()) if counter.exists() else 0
    path = base / f"controller-{served - 1:03d}.txt"
    return path.read_text() if served and path.exists() else ""


def answer(base: Path, argv: list[str]) -> str:
    cmd = argv[0]
    if cmd == "sacct":
        if "-V" in argv:
            return "slurm 24.11.5\n"
        if "--starttime" in argv:
            return _next_chunk(base).read_text()
        return (base / "empty.json").read_text()  # by job ids, batch scripts
    if cmd == "scontrol" and "config" in argv:
        return (f"ClusterName             = {(base / 'cluster').read_text().strip()}\n"
                "SlurmUser               = root(0)\n")
    if cmd == "scontrol" and "job" in argv:
        return _last_controller(base)
    if cmd in ("scontrol", "squeue"):  # nodes, queue: an idle cluster
        return ""
    if cmd == "sacctmgr":
        return "root|Administrator\n"
    raise SystemExit(f"replay_slurm: no answer for {' '.join(argv)}")


def main() -> int:
    base, argv = Path(sys.argv[1]), sys.argv[2:]
    sys.stdout.write(answer(base, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
