"""Assembly: builds the components from a Config. No logic of its own, no global state."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ccadapter.cc.client import CcClient
from ccadapter.config import Config
from ccadapter.daemon import Daemon
from ccadapter.delivery import Deliverer
from ccadapter.lastrun import LastRun
from ccadapter.metrics import Metrics, MetricsServer, NoMetrics, Recorder
from ccadapter.outbox import Outbox
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.server import PrepServer
from ccadapter.reconcilers import Reconciler
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.nodestate import NodeStates
from ccadapter.reconcilers.slurm_window import SlurmWindow
from ccadapter.reconcilers.stale_jobs import StaleJobs
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import SlurmRunner

OUTBOX_FILE = "outbox.sqlite"
# Re-read the last hour every 10 minutes for records slurmdbd got late (one sacct call).
LOOKBACK_SPAN, LOOKBACK_INTERVAL = 3600.0, 600.0


@dataclass
class App:
    config: Config
    collector: Collector
    outbox: Outbox
    client: CcClient
    deliverer: Deliverer
    reconcilers: dict[str, Reconciler]
    intervals: dict[str, float]
    cluster: str
    metrics: Recorder

    def daemon(self) -> Daemon:
        daemon = Daemon(self.deliverer)
        for name, rec in self.reconcilers.items():
            daemon.add_routine(self.metrics.observed(name, rec.run_once), self.intervals[name],
                               name)
        daemon.add_routine(self.compact, 3600, "compact")
        return daemon

    def prep(self, wake: Callable[[], None]) -> tuple[PrepServer, FastPath]:
        """The hook's listener and the fast path behind it (started by the caller)."""
        fast = FastPath(self.collector, self.outbox, wake,
                        ignore=self.config.ignore_hosts_pattern(),
                        max_retries=max(1, self.config.slurm_max_retries),
                        max_delay=self.config.slurm_query_delay,
                        on_received=self.metrics.hook_received,
                        on_drop=self.metrics.hook_dropped)
        server = PrepServer([self.config.prep_sock_listen_path], self.cluster, fast.submit,
                            group=self.config.prep_sock_group, on_drop=self.metrics.hook_dropped)
        return server, fast

    def serve_metrics(self) -> MetricsServer | None:
        """``/metrics`` on ``metricsListen`` (started by the daemon only); None when off.
        Raises OSError when the address cannot be listened on."""
        address = self.config.metrics_address()
        if address is None or not isinstance(self.metrics, Metrics):
            return None
        return self.metrics.serve(*address)

    def compact(self) -> dict[str, int]:
        return {"forgotten": self.outbox.compact(self.config.slurm_query_max_span)}

    def close(self) -> None:
        self.deliverer.close()
        self.client.close()
        self.outbox.close()


def outbox_path(config: Config) -> Path:
    return Path(config.state_directory) / OUTBOX_FILE


def build(config: Config, outbox: Outbox | None = None, last_run: LastRun | None = None,
          workers: int = 16, metrics: bool = False) -> App:
    """``metrics``: record Prometheus metrics (the daemon asks; they are recorded only
    when ``metricsListen`` is set, as nothing else could read them). An ``outbox`` passed
    in reports no enqueued events."""
    recorder: Recorder = Metrics() if metrics and config.metrics_address() else NoMetrics()
    runner = SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout,
                         on_command=recorder.slurm_command)
    collector = Collector(runner, config)
    cluster = collector.cluster_name()
    outbox = outbox or Outbox(outbox_path(config), on_enqueued=recorder.events_enqueued)
    recorder.watch_outbox(outbox)
    client = CcClient(config.cc_rest_url, config.cc_rest_jwt,
                      ca_bundle=config.cc_rest_ca_bundle or None,
                      on_request=recorder.cc_request)
    deliverer = Deliverer(outbox, client, workers=workers, on_result=recorder.delivery_result)
    last_run = last_run or LastRun(config.last_run_path)
    reconcilers: dict[str, Reconciler] = {
        "slurm-window": SlurmWindow(collector, outbox, last_run, config),
        "slurm-lookback": SlurmWindow(collector, outbox, last_run, config,
                                      lookback=LOOKBACK_SPAN),
        "stale-jobs": StaleJobs(collector, outbox, cluster),
        "cc-cache": CcCache(client, collector, outbox, cluster),
        "nodestate": NodeStates(collector, outbox, cluster, config.ignore_hosts_pattern(),
                                time.time),
    }
    intervals = {"slurm-window": config.slurm_poll_interval,
                 "slurm-lookback": LOOKBACK_INTERVAL,
                 "stale-jobs": config.slurm_poll_interval,
                 "cc-cache": config.cc_poll_interval,
                 "nodestate": config.slurm_poll_interval}
    return App(config, collector, outbox, client, deliverer, reconcilers, intervals, cluster,
               recorder)
