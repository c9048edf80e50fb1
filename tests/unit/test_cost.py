"""A cycle's cost in its summary and in the metrics."""

import time

from ccadapter.daemon.cost import costed
from ccadapter.daemon.metrics import Metrics
from ccadapter.slurm.runner import Tally


def test_a_cycle_summary_carries_its_cost():
    spent = Tally()

    def cycle():
        spent.commands, spent.bytes, spent.cpu, spent.seconds = 2, 300, 0.25, 0.01  # a runner
        until = time.thread_time() + 0.02
        while time.thread_time() < until:
            pass
        return {"new_events": 1}

    summary = costed(cycle, lambda: Tally(spent.commands, spent.bytes, spent.cpu,
                                          spent.seconds))()
    cost = summary.pop("cost")
    assert summary == {"new_events": 1}
    assert cost["slurm_commands"] == 2 and cost["slurm_bytes"] == 300
    assert cost["slurm_cpu"] == 0.25 and cost["cpu"] >= 0.02 and cost["seconds"] >= 0.02
    assert cost["slurm_seconds"] == 0.01


def test_metrics_record_the_cost_of_successful_cycles():
    spent = Tally()

    def cycle():
        spent.commands, spent.cpu = spent.commands + 1, spent.cpu + 0.5  # a command's CPU
        return {}

    metrics = Metrics()
    run = metrics.observed("slurm-window", costed(cycle, lambda: Tally(
        spent.commands, spent.bytes, spent.cpu, spent.seconds)), "c1")
    run()
    run()
    value = metrics.registry.get_sample_value
    labels = {"reconciler": "slurm-window", "cluster": "c1"}
    assert value("ccadapter_reconciler_cycle_duration_seconds_count", labels) == 2
    # the Slurm commands' CPU of both cycles, and the daemon's own (a little)
    assert 1.0 <= value("ccadapter_reconciler_cpu_seconds_total", labels) < 1.5
