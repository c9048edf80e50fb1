"""The incidents of the month-of-life run (tests/bench/life.py), each done for real where
it can be: cc-backend stopped, killed inside a commit of its job cache and re-keyed; the
daemon's state disk filled; the daemon stopped, restarted and signalled while it catches up.
Slurm's own incidents (slurmdbd or slurmctld down, records that break ``sacct --json`` or do
not parse) are the simulated Slurm's switches, and the clock step is the site clock's."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.bench.life import Life

# each happens on a day of its own (Plan.incident_days), in this order
INCIDENTS = ("cc-backend down 2 h", "cc-backend restarted inside its job-cache commit",
             "JWT rotated", "clock stepped back 5 min", "slurmdbd down 30 min",
             "slurmctld restarted", "a record that breaks sacct --json",
             "a record that does not parse", "state disk full 10 min",
             "daemon SIGKILLed during a catch-up", "daemon SIGTERMed during a catch-up")
BASELINE = "none (baseline)"


def cc_down(life: Life) -> dict[str, Any]:
    life.cc.stop_server()
    life.hold(2 * 3600)
    life.cc.restart_server()
    return {"did": "cc-backend stopped for 2 h of site time, then started"}


def cc_restart_in_commit(life: Life) -> dict[str, Any]:
    """SIGKILL cc-backend the moment its commit worker starts to sync the job cache, then
    start it again (tests/ccbackend.py: it runs its worker every 3 s meanwhile, with debug
    logging, which says when a sync starts)."""
    seen = life.cc.kill_inside_commit()
    did = (f"killed as its job-cache sync began ({seen['cached_before']} starts cached, "
           f"{seen['cached_after_kill']} after the kill), then started")
    return {"did": did, **seen} if seen["sync_seen"] else \
        {"did": "no sync seen within 60 s", "error": "no commit seen"}


def jwt_rotated(life: Life) -> dict[str, Any]:
    token = life.cc.rotate_keys()
    write_secret(life.jwt_file, token)
    return {"did": "cc-backend's key pair renewed (old token refused), the new token "
                   "written to ccRestJwtFile"}


def clock_back(life: Life) -> dict[str, Any]:
    life.clock.step(-300)
    return {"did": "the daemon's wall clock stepped back 300 s (Slurm's not)"}


def slurmdbd_down(life: Life) -> dict[str, Any]:
    life.slurm("sacct_down", True)
    life.hold(1800)
    life.slurm("sacct_down", False)
    return {"did": "sacct failed (slurmdbd unreachable) for 30 min"}


def slurmctld_restart(life: Life) -> dict[str, Any]:
    life.slurm("controller_down", True)
    life.hold(120)
    life.slurm("controller_down", False)
    return {"did": "squeue/scontrol failed and no hook was sent for 2 min"}


def _next_job(life: Life) -> int:
    """A job submitted from a minute on that runs, not a het job or array, and not
    announced by the hook: only the poll reads it, from slurmdbd's record (a hooked job's
    events come from slurmctld, and the poll need not read its record at all)."""
    w = life.workload
    now = life.clock.site()
    run = next(r for r in w.runs if r.submit > now + 60 and r.ran and not r.het_leader
               and not r.array_job_id and not r.hooked and r.kind in ("complete", "fail", "excl")
               and len(w.by_id[r.job_id]) == 1)
    return run.job_id


def poison(life: Life) -> dict[str, Any]:
    job = _next_job(life)
    life.slurm("poison", [job])
    life.poisoned = job
    life.hold(3600)
    return {"did": f"job {job}'s record breaks `sacct --json` for every batch naming it "
                   "(from now on)", "job": job}


def broken(life: Life) -> dict[str, Any]:
    job = _next_job(life)
    life.slurm("broken", [job])
    life.broken = job
    life.hold(3600)
    return {"did": f"job {job}'s record does not parse (its time limit is not a number)",
            "job": job}


def disk_full(life: Life) -> dict[str, Any]:
    filler = life.state / "filler"
    with filler.open("wb", buffering=0) as fh:
        for size in (1 << 20, 65536, 4096, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue
    life.hold(600)
    filler.unlink()
    return {"did": "the state disk filled to the last byte for 10 min"}


def sigkill_catch_up(life: Life) -> dict[str, Any]:
    return life.restart_daemon(signal.SIGKILL, 6 * 3600)


def sigterm_catch_up(life: Life) -> dict[str, Any]:
    return life.restart_daemon(signal.SIGTERM, 6 * 3600)


def nothing(life: Life) -> dict[str, Any]:
    return {"did": "nothing: what a quiet daemon's recovery time is"}


INCIDENT_ACTIONS: dict[str, Callable[[Life], dict[str, Any]]] = dict(zip(
    (BASELINE, *INCIDENTS),
    (nothing, cc_down, cc_restart_in_commit, jwt_rotated, clock_back, slurmdbd_down,
     slurmctld_restart, poison, broken, disk_full, sigkill_catch_up, sigterm_catch_up),
    strict=True))


def write_secret(path: Path, text: str) -> None:
    tmp = path.with_suffix(".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    tmp.replace(path)
