"""One batch script per array job, not one per task, for the Prolog/Epilog fast path.

Every task of an array job runs the same batch script (slurmctld keeps it once, with the
array), yet slurmctld answers ``write batch_script`` per task: a 10,000-task array that
starts at once cost 10,000 identical REQUEST_BATCH_SCRIPT RPCs (issue 47). The hook's message
says which array a task belongs to before slurmctld is asked (``SLURM_ARRAY_JOB_ID``, which
slurmctld sets for PrologSlurmctld in ``job_common_env_vars``): so one task of each array is
asked for it, and the script is kept (the last ``keep`` arrays') and given to the array's
other tasks, by the array id slurmctld's own record of each task names (``ArrayJobId``).

Parts are asked of slurmctld at once (``prep.fastpath.SLOTS``): a part whose array's script
another part is asking for waits for that answer (up to ``WAIT`` seconds, then its tasks start
without it: the poll's slurmdbd reading does not replace a start), rather than ask again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace

from ccadapter.model import Job

KEEP = 64  # arrays whose script is kept: a burst of many arrays at once asks again, no more
WAIT = 10.0  # seconds a part waits for another part's question of its array's script


class ArrayScripts:
    def __init__(self, keep: int = KEEP, wait: float = WAIT) -> None:
        self.keep, self.wait = max(1, keep), wait
        self._arrays: dict[int, int] = {}  # announced job id -> its array's id, as the hook says
        self._scripts: OrderedDict[int, str] = OrderedDict()  # array id -> its batch script
        # array id -> (the task whose script a part asks for, set once that part is done)
        self._asking: dict[int, tuple[int, threading.Event]] = {}
        self._lock = threading.Lock()

    def note(self, job_id: int, array_job_id: int) -> None:
        """A task announced: its array, as its hook message says (0: no array task)."""
        if array_job_id:
            with self._lock:
                self._arrays[job_id] = array_job_id

    def part_done(self, part: Iterable[int], finished: Iterable[int]) -> None:
        """A part is done, answered or not: parts waiting for its scripts go on. The jobs of
        it the fast path is done with are forgotten (their arrays' scripts stay kept)."""
        with self._lock:
            self._answered(set(part))
            for job_id in finished:
                self._arrays.pop(job_id, None)

    def _answered(self, ids: set[int]) -> None:
        """(Lock held.) The questions these ids asked for their arrays are answered."""
        for array, (job_id, done) in list(self._asking.items()):
            if job_id in ids:
                done.set()
                del self._asking[array]

    def to_ask(self, starts: Iterable[int]) -> set[int]:
        """The starts whose batch script slurmctld is asked for: each one that is no array
        task, and one task of each array whose script is neither kept nor asked for by
        another part."""
        out: set[int] = set()
        with self._lock:
            for job_id in sorted(starts):
                array = self._arrays.get(job_id)
                if array is None:
                    out.add(job_id)
                elif array not in self._scripts and array not in self._asking:
                    self._asking[array] = (job_id, threading.Event())
                    out.add(job_id)
        return out

    def fill(self, jobs: list[Job]) -> list[Job]:
        """``jobs`` with the scripts read of array tasks kept, and a kept script given to each
        started task read without one, once the parts asking for them are done."""
        with self._lock:
            for job in jobs:
                if job.array_job_id and job.job_script:
                    self._scripts[job.array_job_id] = job.job_script
                    self._scripts.move_to_end(job.array_job_id)
            while len(self._scripts) > self.keep:
                self._scripts.popitem(last=False)
            # its own questions answered before it waits: no two parts wait for each other
            self._answered({job.job_id for job in jobs})
            waits = {asking[1] for job in jobs if job.started and not job.job_script
                     and (asking := self._asking.get(job.array_job_id))}
        deadline = time.monotonic() + self.wait
        for done in waits:  # another part's question, in flight
            done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            kept = dict(self._scripts)
        return [replace(job, job_script=kept[job.array_job_id])
                if job.started and not job.job_script and job.array_job_id in kept else job
                for job in jobs]
