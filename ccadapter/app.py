"""Assembly: builds the components from a Config. No logic of its own, no global state.

Delivery paths: cc-backend's REST API (``ccRestSubmitJobs``, the default), then a NATS
notification of what cc-backend took (``natsServer``); or, with ``ccRestSubmitJobs=false``,
NATS alone as the durable path (the outbox keeps an event until NATS has it). Node states
then go to ``natsNodeStateSubject`` when it is set (cc-backend 1.5.4's ``subject-node-state``),
else over REST when ``ccRestUrl`` is set, else nowhere (no nodestate reconciler). With REST as
the job path node states go over REST only: a cc-backend that takes REST jobs does not read
NATS (it mounts start_job/stop_job only without ``api-subjects``, rest.go:90-96 of v1.5.4).
Energy events (a run's consumed energy into its metaData) go over REST in both cases.

Clusters: by default the local one (``scontrol show config``), read without ``--clusters``;
with ``slurmClusters`` each named cluster (or, for ``["*"]``, each that ``sacctmgr list
clusters`` names) gets a :class:`~ccadapter.clusters.ClusterSync` of its own: its collector,
lastRun, reconcilers and hook fast path. The outbox, cc-backend's client and the delivery
are shared: events carry their cluster.

With ``slurmctldFailover`` a ``control`` routine (:mod:`ccadapter.control`) decides whether
this daemon works: the reconcilers are gated on it, and the hook's messages reach the fast
path only while it is active. The role is the daemon's: with ``slurmClusters`` it is read
from the local cluster's controllers (``scontrol ping`` without ``--clusters``) and gates
every served cluster's reconcilers and hook messages alike.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ccadapter import clustername
from ccadapter.cc.client import CcClient
from ccadapter.cc.delivery import RestDelivery
from ccadapter.clusters import ClusterSync, Roster
from ccadapter.config import Config
from ccadapter.config_rules import node_state_path
from ccadapter.control import Control, Role
from ccadapter.cycle_cost import costed
from ccadapter.daemon import Daemon
from ccadapter.delivery import Deliverer
from ccadapter.errors import CcAdapterError
from ccadapter.kinds import EventKind
from ccadapter.metrics import Metrics, MetricsServer, NoMetrics, Recorder
from ccadapter.notify.delivery import NatsDelivery, Subjects
from ccadapter.notify.nats import NatsOptions, NatsPublisher
from ccadapter.ops.status import SERVED_KEY
from ccadapter.outbox import REJECTED, Event, Outbox, Result
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookMessage
from ccadapter.prep.router import HookRouter
from ccadapter.prep.server import PrepServer
from ccadapter.reconcilers import Reconciler
from ccadapter.reconcilers.cc_cache import CcCache
from ccadapter.reconcilers.nodestate import NodeStates
from ccadapter.reconcilers.slurm_window import SlurmWindow, WindowSettings
from ccadapter.reconcilers.stale_jobs import StaleJobs
from ccadapter.retry import RetryPolicies
from ccadapter.runtime.lastrun import LastRun
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.runner import CommandRunner, SlurmRunner

log = logging.getLogger(__name__)

OUTBOX_FILE = "outbox.sqlite"
# Re-read the last hour every 10 minutes for records slurmdbd got late (one sacct call).
LOOKBACK_SPAN, LOOKBACK_INTERVAL = 3600.0, 600.0
# A cluster's lastRun by its scope: None for the default mode's lastRunPath.
LastRuns = Callable[[str | None], LastRun]


@dataclass
class App:
    config: Config
    outbox: Outbox
    client: CcClient | None  # None: no ccRestUrl (NATS is the only path)
    deliverer: Deliverer
    roster: Roster
    intervals: dict[str, float]
    metrics: Recorder
    publisher: NatsPublisher | None = None
    notifier: Deliverer | None = None  # NATS notifications of what REST delivered
    control: Control | None = None  # slurmctldFailover: whether this daemon works
    router: HookRouter = field(default_factory=HookRouter)
    retries: RetryPolicies = field(default_factory=RetryPolicies)

    # --- the clusters --------------------------------------------------------------------

    @property
    def syncs(self) -> list[ClusterSync]:
        """The clusters served now, in the roster's order."""
        return list(self.roster.syncs.values())

    def lanes(self) -> list[str | None]:
        """The daemon's lanes of the clusters served now (:attr:`ClusterSync.scope`)."""
        return [s.scope for s in self.syncs]

    def only(self) -> ClusterSync:
        """The one cluster of the default mode (or of a slurmClusters list of one)."""
        syncs = self.syncs
        if len(syncs) != 1:
            raise ValueError(f"this app serves {len(syncs)} clusters, not one")
        return syncs[0]

    @property
    def collector(self) -> Collector:
        return self.only().collector

    @property
    def reconcilers(self) -> dict[str, Reconciler]:
        return self.only().reconcilers

    @property
    def cluster(self) -> str:
        return self.only().name

    def refresh_clusters(self) -> tuple[list[ClusterSync], list[ClusterSync]]:
        """``["*"]``: read the cluster list again (raises when sacctmgr fails); say and
        record what changed. Returns the clusters added and removed."""
        added, removed = self.roster.refresh()
        for sync in removed:
            log.warning("cluster %s: no longer in `sacctmgr list clusters`: not polled any "
                        "more (what the outbox holds of it is still delivered)", sync.name)
            self.metrics.cluster_served(sync.name, False)
        for sync in added:
            log.info("cluster %s: served from now on (listed by `sacctmgr list clusters`)",
                     sync.name)
            self.metrics.cluster_served(sync.name, True)
        if added or removed:
            self.record_served()
        return added, removed

    def record_served(self) -> None:
        """The served clusters into the outbox's state, for ``status`` (slurmClusters)."""
        if self.config.multi_cluster():
            self.outbox.store.set_state(SERVED_KEY, json.dumps(self.roster.names()))

    # --- the daemon ----------------------------------------------------------------------

    def daemon(self) -> Daemon:
        daemon = Daemon(self.deliverer)
        if self.notifier is not None:
            daemon.add_deliverer(self.notifier, "nats-notify")
        if self.control is not None:  # first: a takeover's catch-up runs in the same pass
            control = self.control
            daemon.add_routine(control.run_once, self.config.slurm_poll_interval, "control")
            daemon.gate = lambda: control.active
        for sync in self.syncs:
            self.metrics.cluster_served(sync.name, True)
            self._add_routines(daemon, sync)
        if self.roster.dynamic:
            # a failed reading is tried again one poll later, not one list interval later;
            # not gated: a standby daemon knows the clusters it would serve on taking over
            daemon.add_routine(partial(self._refresh_daemon, daemon),
                               self.config.slurm_cluster_list_interval, "slurm-clusters",
                               retry=self.config.slurm_poll_interval)
        daemon.add_routine(self.compact, 3600, "compact")
        self.record_served()
        return daemon

    def _add_routines(self, daemon: Daemon, sync: ClusterSync) -> None:
        tally = getattr(sync.collector.runner, "tally", None)
        for name, rec in sync.reconcilers.items():
            daemon.add_routine(self.metrics.observed(name, costed(rec.run_once, tally),
                                                     sync.name),
                               self.intervals[name], name, cluster=sync.scope,
                               gated=True)

    def _refresh_daemon(self, daemon: Daemon) -> dict[str, Any]:
        added, removed = self.refresh_clusters()
        for sync in removed:
            daemon.remove_cluster(sync.name)
            self.router.remove(sync.name)
        for sync in added:
            self._add_routines(daemon, sync)
            self.router.add(sync.name, self._fast_path(sync, daemon.wake_delivery))
        return {"clusters": self.roster.names(), "added": [s.name for s in added],
                "removed": [s.name for s in removed]}

    def prep(self, wake: Callable[[], None], check_control: Callable[[], None] | None = None
             ) -> tuple[PrepServer, HookRouter]:
        """The hook's listeners and the fast path of every served cluster behind them
        (started by the caller). ``check_control``: run the control routine now (a standby
        daemon got a message)."""
        for sync in self.syncs:
            self.router.add(sync.name, self._fast_path(sync, wake))
        cfg = self.config
        # the default mode's socket is the local cluster's; with slurmClusters it is
        # everyone's (messages name their cluster), beside each cluster's own
        main = None if cfg.multi_cluster() else self.cluster
        own = {spec: name for name, spec in cfg.prep_sock_cluster_listen_paths.items()}
        on_message: Callable[[HookMessage], None] = self.router.submit
        if self.control is not None:
            on_message = self._while_active(self.router.submit, check_control)
        server = PrepServer([cfg.prep_sock_listen_path], main, on_message,
                            group=cfg.prep_sock_group, on_drop=self.metrics.hook_dropped,
                            cluster_specs=own)
        return server, self.router

    def _fast_path(self, sync: ClusterSync, wake: Callable[[], None]) -> FastPath:
        return FastPath(sync.collector, self.outbox, wake,
                        ignore=self.config.ignore_hosts_pattern(),
                        retry=self.retries.fast_path,
                        on_received=partial(self.metrics.hook_received, sync.name),
                        on_drop=self.metrics.hook_dropped)

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


def last_runs(config: Config) -> LastRuns:
    """Each cluster's lastRun: ``lastRunPath`` in the default mode; with slurmClusters its
    own file beside it, read from ``lastRunPath`` until it exists
    (:mod:`ccadapter.runtime.lastrun`)."""

    def of(scope: str | None) -> LastRun:
        path = clustername.last_run_path(config.last_run_path, scope)
        return LastRun(path, seed=None if scope is None else config.last_run_path)

    return of


def build(config: Config, outbox: Outbox | None = None, last_run: LastRuns | None = None,
          workers: int = 16, runner: CommandRunner | None = None,
          metrics: bool = False) -> App:
    """``metrics``: record Prometheus metrics (the daemon asks; they are recorded only
    when ``metricsListen`` is set, as nothing else could read them). An ``outbox`` passed
    in reports no enqueued events. ``runner``: runs every cluster's Slurm commands (else
    one runner per cluster, counting its commands under its name). With ``slurmClusters:
    ["*"]`` the roster starts empty: :meth:`App.refresh_clusters` (or the daemon's
    ``slurm-clusters`` routine) fills it."""
    recorder: Recorder = Metrics() if metrics and config.metrics_address() else NoMetrics()
    retries = RetryPolicies.from_config(config)
    base = runner or _runner(config, recorder, "", retries)
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
    intervals = {"slurm-window": config.slurm_poll_interval,
                 "slurm-lookback": LOOKBACK_INTERVAL,
                 "stale-jobs": config.slurm_poll_interval,
                 "cc-cache": config.cc_poll_interval,
                 "nodestate": config.slurm_poll_interval}
    parts = _Parts(config, outbox, client, last_run or last_runs(config), node_states)

    def make(name: str, config_text: str = "") -> ClusterSync:
        return parts.sync(name, config.multi_cluster(),
                          runner or _runner(config, recorder, name, retries), config_text)

    # the local cluster's collector, without --clusters: its name in the default mode, its
    # controllers for slurmctldFailover
    local = Collector(base, CollectorSettings.from_config(config))
    if not config.multi_cluster():
        # the config just read also says whether energy is gathered: not asked twice
        name = local.cluster_name()
        roster = Roster(partial(make, config_text=local.config_text), [name])
    elif config.slurm_clusters == [clustername.ALL]:
        roster = Roster(make, listing=ClusterList(base))
    else:
        roster = Roster(make, config.slurm_clusters)
    control = _control(config, local, outbox, recorder, roster)
    return App(config, outbox, client, deliverer, roster, intervals, recorder, publisher,
               notifier, control, retries=retries)


def _control(config: Config, collector: Collector, outbox: Outbox, recorder: Recorder,
             roster: Roster) -> Control | None:
    """The failover role (None without ``slurmctldFailover``: always active). A switch
    sets the metric; a takeover also tells the slurm-window of every cluster served then to
    read from lastRun afresh."""
    if not config.slurmctld_failover:
        recorder.role(Role.ACTIVE.value)
        return None

    def changed(role: Role) -> None:
        recorder.role(role.value)
        if role is Role.ACTIVE:
            for sync in roster.syncs.values():
                window = sync.reconcilers["slurm-window"]
                assert isinstance(window, SlurmWindow)
                window.take_over()

    recorder.role(Role.STANDBY.value)
    return Control(collector, config.controller_host(), record=outbox.store.set_state,
                   on_change=changed)


def _runner(config: Config, recorder: Recorder, cluster: str,
            retries: RetryPolicies) -> SlurmRunner:
    """Slurm commands whose metrics count under ``cluster`` ("": of no one cluster)."""
    return SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout,
                       retry=retries.slurm,
                       on_command=partial(recorder.slurm_command, cluster=cluster))


@dataclass(frozen=True)
class _Parts:
    """What every cluster's sync is built from."""

    config: Config
    outbox: Outbox
    client: CcClient | None
    last_runs: LastRuns
    node_states: str | None  # node_state_path()

    def sync(self, name: str, scoped: bool, runner: CommandRunner,
             config_text: str = "") -> ClusterSync:
        """``name``'s collector (``--clusters NAME`` when ``scoped``), lastRun and
        reconcilers; ``config_text``: its ``scontrol show config`` if read already."""
        cfg, outbox, client = self.config, self.outbox, self.client
        collector = Collector(runner, CollectorSettings.from_config(cfg),
                              cluster=name if scoped else None, config_text=config_text)
        last_run = self.last_runs(name if scoped else None)
        # the default mode asks at start (its one slurmctld must answer to start at all)
        probe = EnergyProbe(collector, name) if scoped else None
        window = WindowSettings(name, cfg.slurm_poll_interval, cfg.slurm_query_max_span,
                                cfg.slurm_window_overlap, cfg.ignore_hosts_pattern(),
                                energy=False if scoped else _energy_sent(collector, None),
                                scoped=scoped)
        reconcilers: dict[str, Reconciler] = {
            "slurm-window": SlurmWindow(collector, outbox, last_run, window,
                                        energy_probe=probe),
            "slurm-lookback": SlurmWindow(collector, outbox, last_run, window,
                                          lookback=LOOKBACK_SPAN, energy_probe=probe),
            "stale-jobs": StaleJobs(collector, outbox, name),
        }
        if client is not None and cfg.cc_rest_submit_jobs:
            # cc-cache re-sends what cc-backend lost; over REST only: with NATS as the job
            # path, the stream's acknowledgement is the proof of delivery, not cc-backend's
            # job list.
            reconcilers["cc-cache"] = CcCache(client, collector, outbox, name,
                                              cfg.cc_commit_job_interval)
        if self.node_states is not None:
            reconcilers["nodestate"] = NodeStates(collector, outbox, name,
                                                  cfg.ignore_hosts_pattern(), time.time)
        return ClusterSync(name, scoped, collector, last_run, reconcilers)


class EnergyProbe:
    """With slurmClusters: whether a cluster's consumed energy is sent, asked of its
    slurmctld in the cluster's own lane at its first window rather than at start (a hung
    slurmctld must not hold up the start of the other clusters), and asked again at each
    window until it answers; until then no run is read again for energy."""

    def __init__(self, collector: Collector, cluster: str) -> None:
        self.collector = collector
        self.cluster = cluster
        self.known: bool | None = None
        self._said = False

    def __call__(self) -> bool:
        if self.known is None:
            try:
                self.known = _energy_sent(self.collector, self.cluster)
            except CcAdapterError as exc:
                if not self._said:
                    log.warning("cluster %s: energy: cannot read slurmctld's config (%s); "
                                "asked again at the next window", self.cluster, exc)
                    self._said = True
                return False
        return self.known


def _energy_sent(collector: Collector, cluster: str | None) -> bool:
    """Whether consumed energy goes to cc-backend: slurmctld gathers it and there is a
    REST path for it (the collector keeps it only then). Said once; the line names
    ``cluster`` where slurmClusters names clusters (None: the default mode)."""
    of = "" if cluster is None else f"cluster {cluster}: "
    if not collector.energy_accounted():
        log.info("%senergy: slurmctld gathers none (AcctGatherEnergyType); no "
                 "metaData.energy", of)
        return False
    if not collector.settings.energy:
        log.info("%senergy: slurmctld gathers it, but it goes to cc-backend over REST only "
                 "and ccRestUrl is empty: no metaData.energy", of)
        return False
    log.info("%senergy: the consumed energy of each run goes into its metaData.energy "
             "(PATCH /api/jobs/edit_meta/ after the stop)", of)
    return True


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
