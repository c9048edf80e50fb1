"""The plots of a long life (issue 37): the daemon's figures over site days
(tests/bench/life.py) or minutes (tests/bench/soak.py), drawn by the benchmark beside its
results file (the ``bench`` extra's matplotlib)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on the machines this runs on
import matplotlib.pyplot as plt


def plot(points: list[dict], x: str, xlabel: str, out: Path,
         log_label: str = "log lines") -> str:
    """RSS, fds, outbox size and log lines against ``x``; returns the file's name."""
    xs = [p[x] for p in points]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    for ax, (key, label) in zip(axes.flat, (("rss_mb", "RSS (MB)"), ("fds", "open fds"),
                                            ("outbox_mb", "outbox file (MB)"),
                                            ("log_lines", log_label)), strict=True):
        ax.plot(xs, [p[key] for p in points], "o-", markersize=3)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out.name
