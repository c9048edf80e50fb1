"""lastRun: the end of the last Slurm window whose events are all in the outbox, kept as a
file's mtime exactly like cc-slurm-adapter, so a migrating site keeps its position."""

from __future__ import annotations

import os
from pathlib import Path


class LastRun:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def get(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):  # never written (or cannot be)
            return None

    def set(self, ts: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        os.utime(self.path, (ts, ts))
