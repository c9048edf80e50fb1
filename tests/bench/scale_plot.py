"""The scale benchmark's plot: Slurm-side cost per poll cycle against queue size, ccadapter
(all reconcilers of one poll interval) beside cc-slurm-adapter's two per-poll commands."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on the machines this runs on
import matplotlib.pyplot as plt

from tests.bench.render_scale import POLL_RECONCILERS, anchor_per_poll, ours_per_poll


def plot(data: dict, out: Path) -> str:
    """Write the PNG; returns its path relative to the repository."""
    levels = sorted(data["levels"], key=lambda lv: lv["queued"])
    x = [lv["queued"] for lv in levels]
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    ax_t.plot(x, [ours_per_poll(lv, "wall_median") for lv in levels], "o-",
              label="ccadapter: wall per poll")
    ax_t.plot(x, [ours_per_poll(lv, "total_cpu_median") for lv in levels], "o--",
              label="ccadapter: CPU per poll")
    ax_t.plot(x, [anchor_per_poll(lv, "wall") for lv in levels], "s-",
              label="cc-slurm-adapter commands: wall")
    ax_t.plot(x, [anchor_per_poll(lv, "cpu") for lv in levels], "s--",
              label="cc-slurm-adapter commands: client CPU")
    ax_t.set_xlabel("queued jobs")
    ax_t.set_ylabel("seconds per poll")
    ax_t.legend(fontsize="small")
    ax_b.plot(x, [sum(lv["reconcilers"].get(n, {}).get("bytes_median", 0)
                      for n in POLL_RECONCILERS) / 1e6 for lv in levels], "o-",
              label="ccadapter")
    ax_b.plot(x, [anchor_per_poll(lv, "bytes") / 1e6 for lv in levels], "s-",
              label="cc-slurm-adapter commands")
    ax_b.set_xlabel("queued jobs")
    ax_b.set_ylabel("MB read from Slurm per poll")
    ax_b.legend(fontsize="small")
    fig.suptitle(f"Cost per poll against queue size ({data['nodes']} nodes, Slurm "
                 f"{data['version']}, churn running)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80, metadata={"Software": None})
    plt.close(fig)
    return "tests/bench/results/" + out.name
