"""Assembly: builds the components from a Config. No logic of its own, no global state.

Delivery paths: cc-backend's REST API (``ccRestSubmitJobs``, the default), then a NATS
notification of what cc-backend took (``natsServer``); or, with ``ccRestSubmitJobs=false``,
NATS alone as the durable path (the outbox keeps an event until NATS has it). Node states
then go to ``natsNodeStateSubject`` when it is set (cc-backend 1.5.4's ``subject-node-state``),
else over REST when ``ccRestUrl`` is set, else nowhere (no nodestate reconciler). With REST as
the job path node states go over REST only: a cc-backend that takes REST jobs does not read
NATS (it mounts start_job/stop_job only without ``api-subjects``, rest.go:90-96 of v1.5.4).
Energy events (a run's consumed energy into its metaData) go over REST in both cases.

With ``slurmctldFailover`` a ``control`` routine (:mod:`ccadapter.control`) decides whether
this daemon works: the reconcilers are gated on it, and the hook's messages reach the fast
path only while it is active.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccadapter.cc.client import CcClient
from ccadapter.config import Config
from ccadapter.control import Control, Role
from ccadapter.cycle_cost import costed
from ccadapter.daemon import Daemon
from ccadapter.delivery import Deliverer, RestDelivery
from ccadapter.kinds import EventKind
from ccadapter.lastrun import LastRun
from ccadapter.metrics import Metrics, MetricsServer, NoMetrics, Recorder
from ccadapter.notify.delivery import NatsDelivery, Subjects
from ccadapter.notify.nats import NatsOptions, NatsPublisher
from ccadapter.outbox import REJECTED, Event, Outbox, Result
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookMessage
from ccadapter.prep.server import PrepServer
from ccadapter.reconcilers import Reconciler
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.nodestate import NodeStates
from ccadapter.reconcilers.slurm_window import SlurmWindow, WindowSettings
from ccadapter.reconcilers.stale_jobs import StaleJobs
from ccadapter.retry import RetryPolicies
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.runner import CommandRunner, SlurmRunner

log = logging.getLogger(__name__)

OUTBOX_FILE = "outbox.sqlite"
# Re-read the last hour every 10 minutes for records slurmdbd got late (one sacct call).
LOOKBACK_SPAN, LOOKBACK_INTERVAL = 3600.0, 600.0


@dataclass
class App:
    config: Config
    collector: Collector
    outbox: Outbox
    client: CcClient | None  # None: no ccRestUrl (NATS is the only path)
    deliverer: Deliverer
    reconcilers: dict[str, Reconciler]
    intervals: dict[str, float]
    cluster: str
    metrics: Recorder
    publisher: NatsPublisher | None = None
    notifier: Deliverer | None = None  # NATS notifications of what REST delivered
    control: Control | None = None  # slurmctldFailover: whether this daemon works
    retries: RetryPolicies = field(default_factory=RetryPolicies)

    def daemon(self) -> Daemon:
        daemon = Daemon(self.deliverer)
        if self.notifier is not None:
            daemon.add_deliverer(self.notifier, "nats-notify")
        if self.control is not None:  # first: a takeover's catch-up runs in the same pass
            control = self.control
            daemon.add_routine(control.run_once, self.config.slurm_poll_interval, "control")
            daemon.gate = lambda: control.active
        tally = getattr(self.collector.runner, "tally", None)
        for name, rec in self.reconcilers.items():
            daemon.add_routine(self.metrics.observed(name, costed(rec.run_once, tally)),
                               self.intervals[name], name, gated=True)
        daemon.add_routine(self.compact, 3600, "compact")
        return daemon

    def prep(self, wake: Callable[[], None], check_control: Callable[[], None] | None = None
             ) -> tuple[PrepServer, FastPath]:
        """The hook's listener and the fast path behind it (started by the caller).
        ``check_control``: run the control routine now (a standby daemon got a message)."""
        fast = FastPath(self.collector, self.outbox, wake,
                        ignore=self.config.ignore_hosts_pattern(),
                        retry=self.retries.fast_path,
                        on_received=self.metrics.hook_received,
                        on_drop=self.metrics.hook_dropped)
        on_message: Callable[[HookMessage], None] = fast.submit
        if self.control is not None:
            on_message = self._while_active(fast.submit, check_control)
        server = PrepServer([self.config.prep_sock_listen_path], self.cluster, on_message,
                            group=self.config.prep_sock_group, on_drop=self.metrics.hook_dropped)
        return server, fast

    def _while_active(self, submit: Callable[[HookMessage], None],
                      check_control: Callable[[], None] | None
                      ) -> Callable[[HookMessage], None]:
        """Hook messages go to the fast path while this daemon is active. A standby daemon
        drops them: the daemon in control finds those jobs, or this one does from lastRun
        once it takes over; a message here says its slurmctld runs Prolog/Epilog, so
        control is checked at once."""
        control = self.control
        assert control is not None

        def on_message(msg: HookMessage) -> None:
            if control.active:
                submit(msg)
                return
            log.info("standby: hook message for job %d %s dropped (the daemon in control "
                     "finds it); checking which slurmctld is in control", msg.job_id,
                     msg.event)
            self.metrics.hook_dropped("standby")
            if check_control:
                check_control()

        return on_message

    def serve_metrics(self) -> MetricsServer | None:
        """``/metrics`` on ``metricsListen`` (started by the daemon only); None when off.
        Raises OSError when the address cannot be listened on."""
        address = self.config.metrics_address()
        if address is None or not isinstance(self.metrics, Metrics):
            return None
        return self.metrics.serve(*address)

    def compact(self) -> dict[str, int]:
        return {"forgotten": self.outbox.compact(self.config.slurm_query_max_span)}

    def start_publishing(self, wait: float = 0.0) -> None:
        """Connect to NATS in the background; ``wait`` seconds at most for the first
        connection (one-shot commands), 0 for the daemon, which must run without NATS."""
        if self.publisher is None:
            return
        self.publisher.start()
        until = time.monotonic() + wait
        while not self.publisher.connected and time.monotonic() < until:
            time.sleep(0.05)

    def deliver_once(self) -> dict[str, Any]:
        """One-shot commands: deliver what is due now (REST or NATS), then the NATS
        notifications it owes; the daemon retries whatever is left."""
        self.start_publishing(wait=self.config.nats_publish_timeout)
        stats = self.deliverer.run_once()
        summary: dict[str, Any] = {"delivered": stats.delivered, "retry_later": stats.retried,
                                   "rejected": stats.rejected}
        if self.notifier is not None:
            nats = self.notifier.run_once()
            summary["nats"] = {"published": nats.delivered, "retry_later": nats.retried,
                               "rejected": nats.rejected}
        return summary

    def close(self) -> None:
        self.deliverer.close()
        if self.notifier is not None:
            self.notifier.close()
        if self.publisher is not None:
            self.publisher.close()
        if self.client is not None:
            self.client.close()
        self.outbox.close()


def outbox_path(config: Config) -> Path:
    return config.state_dir() / OUTBOX_FILE


def build(config: Config, outbox: Outbox | None = None, last_run: LastRun | None = None,
          workers: int = 16, runner: CommandRunner | None = None,
          metrics: bool = False) -> App:
    """``metrics``: record Prometheus metrics (the daemon asks; they are recorded only
    when ``metricsListen`` is set, as nothing else could read them). An ``outbox`` passed
    in reports no enqueued events."""
    recorder: Recorder = Metrics() if metrics and config.metrics_address() else NoMetrics()
    retries = RetryPolicies.from_config(config)
    runner = runner or SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout,
                                   retry=retries.slurm, on_command=recorder.slurm_command)
    collector = Collector(runner, CollectorSettings.from_config(config))
    cluster = collector.cluster_name()
    nats_on = bool(config.nats_server)
    outbox = outbox or Outbox(outbox_path(config), backoff=retries.outbox,
                              on_enqueued=recorder.events_enqueued)
    outbox.notify = nats_on and config.cc_rest_submit_jobs
    recorder.watch_outbox(outbox)
    # one connection per delivery worker, and one for a reconciler's read beside them
    client = CcClient(config.cc_rest_url, config.cc_rest_jwt,
                      ca_bundle=config.cc_rest_ca_bundle or None, pool_size=workers + 1,
                      retry=retries.http, on_request=recorder.cc_request
                      ) if config.cc_rest_url else None
    publisher = NatsPublisher(NatsOptions.from_config(config), retries.nats_connect) \
        if nats_on else None
    subjects = Subjects(config.nats_subject, config.nats_node_state_subject)
    nats = NatsDelivery(publisher, socket.gethostname(), subjects) if publisher else None
    node_states = node_state_path(config)
    rest = RestDelivery(client) if client else None
    notifier = None
    if config.cc_rest_submit_jobs:
        assert rest is not None, "ccRestUrl is checked before build()"
        deliver = rest
        if nats is not None:
            notifier = Deliverer(outbox.notifications(), nats, workers=workers,
                                 on_result=recorder.nats_result)
    else:
        assert nats is not None, "natsServer is checked before build()"
        deliver = _route(nats, rest, node_states_on_nats=node_states == "nats")
    deliverer = Deliverer(outbox.queue, deliver, workers=workers,
                          on_result=recorder.delivery_result)
    last_run = last_run or LastRun(config.last_run_path)
    window = WindowSettings(cluster, config.slurm_poll_interval, config.slurm_query_max_span,
                            config.slurm_window_overlap, config.ignore_hosts_pattern(),
                            energy=_energy_sent(collector))
    slurm_window = SlurmWindow(collector, outbox, last_run, window)
    reconcilers: dict[str, Reconciler] = {
        "slurm-window": slurm_window,
        "slurm-lookback": SlurmWindow(collector, outbox, last_run, window,
                                      lookback=LOOKBACK_SPAN),
        "stale-jobs": StaleJobs(collector, outbox, cluster),
    }
    intervals = {"slurm-window": config.slurm_poll_interval,
                 "slurm-lookback": LOOKBACK_INTERVAL,
                 "stale-jobs": config.slurm_poll_interval,
                 "cc-cache": config.cc_poll_interval,
                 "nodestate": config.slurm_poll_interval}
    if client is not None and config.cc_rest_submit_jobs:
        # cc-cache re-sends what cc-backend lost; over REST only: with NATS as the job path,
        # the stream's acknowledgement is the proof of delivery, not cc-backend's job list.
        reconcilers["cc-cache"] = CcCache(client, collector, outbox, cluster,
                                          config.cc_commit_job_interval)
    if node_states is not None:
        reconcilers["nodestate"] = NodeStates(collector, outbox, cluster,
                                              config.ignore_hosts_pattern(), time.time)
    control = _control(config, collector, outbox, recorder, slurm_window)
    return App(config, collector, outbox, client, deliverer, reconcilers, intervals, cluster,
               recorder, publisher, notifier, control, retries)


def _control(config: Config, collector: Collector, outbox: Outbox, recorder: Recorder,
             window: SlurmWindow) -> Control | None:
    """The failover role (None without ``slurmctldFailover``: always active). A switch
    sets the metric; a takeover also tells slurm-window to read from lastRun afresh."""
    if not config.slurmctld_failover:
        recorder.role(Role.ACTIVE.value)
        return None

    def changed(role: Role) -> None:
        recorder.role(role.value)
        if role is Role.ACTIVE:
            window.take_over()

    recorder.role(Role.STANDBY.value)
    return Control(collector, config.controller_host(), record=outbox.store.set_state,
                   on_change=changed)


def _energy_sent(collector: Collector) -> bool:
    """Whether consumed energy goes to cc-backend: slurmctld gathers it and there is a
    REST path for it (the collector keeps it only then). Said once, at start."""
    if not collector.energy_accounted():
        log.info("energy: slurmctld gathers none (AcctGatherEnergyType); no metaData.energy")
        return False
    if not collector.settings.energy:
        log.info("energy: slurmctld gathers it, but it goes to cc-backend over REST only "
                 "and ccRestUrl is empty: no metaData.energy")
        return False
    log.info("energy: the consumed energy of each run goes into its metaData.energy "
             "(PATCH /api/jobs/edit_meta/ after the stop)")
    return True


def node_state_path(config: Config) -> str | None:
    """Where node states go: "rest" (``/api/nodestate/``), "nats" (natsNodeStateSubject)
    or None (nowhere: no nodestate reconciler). See the module docstring."""
    if not config.cc_rest_submit_jobs and config.nats_server and \
            config.nats_node_state_subject:
        return "nats"
    return "rest" if config.cc_rest_url else None


def node_state_warnings(config: Config) -> list[str]:
    """What an admin may not expect of their node-state settings, one line each."""
    if config.nats_node_state_subject and node_state_path(config) != "nats":
        return ["natsNodeStateSubject is used only when NATS is the job path "
                "(ccRestSubmitJobs: false, natsServer set); node states go to cc-backend's "
                "REST API (/api/nodestate/), as a cc-backend that takes jobs over REST does "
                "not read NATS"]
    if not config.cc_rest_submit_jobs and node_state_path(config) is None:
        return ["node states are not sent: set natsNodeStateSubject to cc-backend's "
                "subject-node-state (e.g. cc.node.state), or ccRestUrl for /api/nodestate/"]
    return []


def _route(nats: NatsDelivery, rest: RestDelivery | None, *, node_states_on_nats: bool
           ) -> Callable[[Event], Result]:
    """NATS as the only job path: starts and stops to NATS; node states to NATS when
    natsNodeStateSubject is set, else to REST; energy to REST (cc-backend's NATS API has no
    message for metadata; its REST edit_meta stays mounted, rest.go:102-103)."""

    def deliver(event: Event) -> Result:
        if event.kind in (EventKind.START, EventKind.STOP) or (
                event.kind == EventKind.NODESTATE and node_states_on_nats):
            return nats(event)
        if rest is None:  # left from a time with ccRestUrl or with natsNodeStateSubject
            return Result(event.id, REJECTED, f"{event.kind} has no way out: "
                          f"{_NO_WAY_OUT.get(event.kind, 'set ccRestUrl')}")
        return rest(event)

    return deliver


_NO_WAY_OUT = {EventKind.NODESTATE: "set natsNodeStateSubject (or ccRestUrl)",
               EventKind.ENERGY: "it goes over REST only: set ccRestUrl"}
