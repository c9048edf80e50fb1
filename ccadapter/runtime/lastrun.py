"""lastRun: the end of the last Slurm window whose events are all in the outbox, kept as a
file's mtime exactly like cc-slurm-adapter, so a migrating site keeps its position.

With several clusters (``slurmClusters``) each cluster has its own file,
``lastRunPath.CLUSTER`` (:func:`ccadapter.model.last_run_path`): one cluster's window
moves on while another's Slurm fails. cc-slurm-adapter keeps one file for all its clusters,
so until a cluster's own file exists, its lastRun is read from ``lastRunPath`` (the
``seed``); it is never written there again.
"""

from __future__ import annotations

import os
from pathlib import Path


class LastRun:
    def __init__(self, path: str | Path, seed: str | Path | None = None) -> None:
        self.path = Path(path)
        self.seed = Path(seed) if seed is not None else None

    def get(self) -> float | None:
        own = _mtime(self.path)
        if own is None and self.seed is not None:
            return _mtime(self.seed)
        return own

    def set(self, ts: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        os.utime(self.path, (ts, ts))


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except (FileNotFoundError, NotADirectoryError):  # never written (or cannot be)
        return None
