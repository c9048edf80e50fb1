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
from ccadapter.outbox import Outbox
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.server import PrepServer
from ccadapter.reconcilers import Reconciler
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.nodestate import NodeStates
from ccadapter.reconcilers.slurm_window import SlurmWindow
from ccadapter.reconcilers.stale_jobs import StaleJobs
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import CommandRunner, SlurmRunner

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

    def daemon(self) -> Daemon:
        daemon = Daemon(self.deliverer)
        for name, rec in self.reconcilers.items():
            daemon.add_routine(rec.run_once, self.intervals[name], name)
        daemon.add_routine(self.compact, 3600, "compact")
        return daemon

    def prep(self, wake: Callable[[], None]) -> tuple[PrepServer, FastPath]:
        """The hook's listener and the fast path behind it (started by the caller)."""
        fast = FastPath(self.collector, self.outbox, wake,
                        ignore=self.config.ignore_hosts_pattern(),
                        max_retries=max(1, self.config.slurm_max_retries),
                        max_delay=self.config.slurm_query_delay)
        server = PrepServer([self.config.prep_sock_listen_path], self.cluster, fast.submit,
                            group=self.config.prep_sock_group)
        return server, fast

    def compact(self) -> dict[str, int]:
        return {"forgotten": self.outbox.compact(self.config.slurm_query_max_span)}

    def close(self) -> None:
        self.deliverer.close()
        self.client.close()
        self.outbox.close()


def outbox_path(config: Config) -> Path:
    return Path(config.state_directory) / OUTBOX_FILE


def build(config: Config, outbox: Outbox | None = None, last_run: LastRun | None = None,
          workers: int = 16, runner: CommandRunner | None = None) -> App:
    runner = runner or SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout)
    collector = Collector(runner, config)
    cluster = collector.cluster_name()
    outbox = outbox or Outbox(outbox_path(config))
    client = CcClient(config.cc_rest_url, config.cc_rest_jwt,
                      ca_bundle=config.cc_rest_ca_bundle or None)
    deliverer = Deliverer(outbox, client, workers=workers)
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
    return App(config, collector, outbox, client, deliverer, reconcilers, intervals, cluster)
