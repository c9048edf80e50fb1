"""Assembly: builds the components from a Config. No logic of its own, no global state.

Delivery paths: cc-backend's REST API (``ccRestSubmitJobs``, the default), then a NATS
notification of what cc-backend took (``natsServer``); or, with ``ccRestSubmitJobs=false``,
NATS alone as the durable path (the outbox keeps an event until NATS has it). Node states
then go to ``natsNodeStateSubject`` when it is set (cc-backend 1.5.4's ``subject-node-state``),
else over REST when ``ccRestUrl`` is set, else nowhere (no nodestate reconciler). With REST as
the job path node states go over REST only: a cc-backend that takes REST jobs does not read
NATS (it mounts start_job/stop_job only without ``api-subjects``: v1.5.4 rest.go).
Energy events (a run's consumed energy into its metaData) go over REST in both cases.

Clusters: by default the local one (``scontrol show config``), read without ``--clusters``;
with ``slurmClusters`` each named cluster (or, for ``["*"]``, each that ``sacctmgr list
clusters`` names) gets a :class:`~ccadapter.daemon.cluster_sync.ClusterSync` of its own: its
collector, lastRun, reconcilers and hook fast path. The outbox, cc-backend's client and the delivery
are shared: events carry their cluster.

With ``slurmctldFailover`` a ``control`` routine (:mod:`ccadapter.daemon.control`) decides whether
this daemon works: the reconcilers are gated on it, and the hook's messages reach the fast
path only while it is active. The role is the daemon's: with ``slurmClusters`` it is read
from the local cluster's controllers (``scontrol ping`` without ``--clusters``) and gates
every served cluster's reconcilers and hook messages alike.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from functools import partial
from typing import Any

from ccadapter.cc.client import CcClient
from ccadapter.cc.rest_delivery import RestDelivery, adopt_before
from ccadapter.cc.token import TokenSource
from ccadapter.config.keys import Config
from ccadapter.config.rules import Target, node_state_path
from ccadapter.config.views import outbox_path
from ccadapter.daemon.app import App
from ccadapter.daemon.cluster_sync import (
    LOOKBACK_INTERVAL,
    LOST_STOPS_INTERVAL,
    ClusterSync,
    LastRuns,
    Roster,
    SyncParts,
    last_runs,
)
from ccadapter.daemon.control import Control, Role
from ccadapter.daemon.deliverer import Deliverer, nats_first
from ccadapter.daemon.recorder import NoMetrics, Recorder
from ccadapter.model import ALL_CLUSTERS
from ccadapter.notify.nats_delivery import NatsDelivery, Subjects
from ccadapter.numbering.renumber import (
    STATE_KEY,
    ClusterFiles,
    Renumbering,
    Topologies,
    layouts_of,
)
from ccadapter.numbering.topology import parse_clusters
from ccadapter.outbox import Event, Outbox, Result
from ccadapter.prep.fastpath import SESSIONS
from ccadapter.prep.tally import HookTally
from ccadapter.reconcilers.slurm_window import SlurmWindow
from ccadapter.retry import RetryPolicies
from ccadapter.runtime.clock import SYSTEM, Clock
from ccadapter.runtime.stopflag import StopFlag
from ccadapter.runtime.watchdog import Liveness
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.runner import CommandRunner, SlurmRunner


def build(config: Config, outbox: Outbox | None = None, last_run: LastRuns | None = None,
          workers: int = 16, runner: CommandRunner | None = None,
          metrics: bool = False, clock: Clock = SYSTEM) -> App:
    """``metrics``: record Prometheus metrics (the daemon asks; they are recorded only
    when ``metricsListen`` is set, as nothing else could read them). An ``outbox`` passed
    in reports no enqueued events. ``runner``: runs every cluster's Slurm commands (else
    one runner per cluster, counting its commands under its name). With ``slurmClusters:
    ["*"]`` the roster starts empty: :meth:`App.refresh_clusters` (or the daemon's
    ``slurm-clusters`` routine) fills it. ``clock``: what every part reads the time from
    and how the daemon's routines wait (:mod:`ccadapter.runtime.clock`)."""
    recorder: Recorder = NoMetrics()
    if metrics and config.metrics_address():
        from ccadapter.daemon.metrics import Metrics  # prometheus_client where it is read

        recorder = Metrics()
    retries = RetryPolicies.from_config(config)
    stop = StopFlag()  # the daemon's stop, read by its routines and their Slurm commands
    owned: list[SlurmRunner] = []  # the runners built here, whose scontrol close() ends
    liveness = Liveness()  # every Slurm command and cc-backend request that ends moves it

    def new_runner(name: str) -> CommandRunner:
        if runner is not None:
            return runner
        owned.append(_runner(config, both(partial(recorder.slurm_command, cluster=name),
                                          liveness.touch), retries, stop))
        return owned[-1]

    base = new_runner("")
    nats_on = bool(config.nats_server)
    outbox = outbox or Outbox(outbox_path(config), clock.now, backoff=retries.outbox,
                              on_enqueued=recorder.events_enqueued)
    outbox.notify = nats_on and config.cc_rest_submit_jobs
    recorder.watch_outbox(outbox)
    # one connection per delivery worker, and one for a reconciler's read beside them
    client = CcClient(config.cc_rest_url, token_source(config),
                      ca_bundle=config.cc_rest_ca_bundle or None, pool_size=workers + 1,
                      retry=retries.http, on_request=both(recorder.cc_request, liveness.touch)
                      ) if config.cc_rest_url else None
    publisher = None
    if nats_on:
        from ccadapter.notify.nats import NatsOptions, NatsPublisher
        publisher = NatsPublisher(NatsOptions.from_config(config), retries.nats_connect)
    subjects = Subjects(config.nats_subject, config.nats_node_state_subject)
    # the local cluster's collector, without --clusters: its name in the default mode, its
    # controllers for slurmctldFailover, the nodes' layouts the starts are mapped with
    local = Collector(base, CollectorSettings.from_config(config), clock.now)
    numbering = _numbering(config, client, local, outbox, recorder)
    nats = NatsDelivery(publisher, socket.gethostname(), subjects,
                        renumber=numbering.start_body) if publisher else None
    node_states = node_state_path(config)
    last_run = last_run or last_runs(config)
    adopt = adopt_before(outbox.store, last_run(None).get() is not None, clock.now())
    rest = RestDelivery(client, client.token.where, clock=clock.now,
                        adopt_before=adopt, renumber=numbering.start_body,
                        held_instead=outbox.held_instead) if client else None
    notifier = None
    if config.cc_rest_submit_jobs:
        assert rest is not None, "ccRestUrl is checked before build()"
        deliver: Callable[[Event], Result] = rest
        if nats is not None:
            notifier = Deliverer(outbox.notifications(), nats, workers=workers,
                                 on_result=recorder.nats_result)
    else:
        assert nats is not None, "natsServer is checked before build()"
        deliver = nats_first(nats, rest, node_states_on_nats=node_states == Target.NATS)
    deliverer = Deliverer(outbox.queue, deliver, workers=workers,
                          on_result=recorder.delivery_result)
    intervals = {"slurm-window": config.slurm_poll_interval,
                 "slurm-lookback": LOOKBACK_INTERVAL,
                 "stale-jobs": config.slurm_poll_interval,
                 "cc-cache": config.cc_poll_interval,
                 "lost-stops": LOST_STOPS_INTERVAL,
                 "nodestate": config.slurm_poll_interval}
    parts = SyncParts(config, outbox, client, last_run, node_states, stop,
                      clock.now)

    def make(name: str, config_text: str = "") -> ClusterSync:
        return parts.sync(name, config.multi_cluster(),
                          new_runner(name), config_text)

    if not config.multi_cluster():
        # the config just read also says whether energy is gathered: not asked twice
        name = local.cluster_name()
        roster = Roster(partial(make, config_text=local.config_text), [name])
    elif config.slurm_clusters == [ALL_CLUSTERS]:
        roster = Roster(make, listing=ClusterList(base))
    else:
        roster = Roster(make, config.slurm_clusters)
    control = _control(config, local, outbox, recorder, roster)
    hook = HookTally(on_received=recorder.hook_received, on_drop=recorder.hook_dropped,
                     on_unknown=recorder.hook_unknown, clock=clock.monotonic, wall=clock.now,
                     started=clock.now())
    return App(config, outbox, client, deliverer, roster, intervals, recorder, publisher,
               notifier, control, hook=hook, retries=retries, runners=owned,
               liveness=liveness, stop=stop, clock=clock)


def _numbering(config: Config, client: CcClient | None, local: Collector, outbox: Outbox,
               recorder: Recorder) -> Renumbering:
    """The mapping of each start's resources into cc-backend's numbering: through
    ``ccClusterJson`` where set, else cc-backend's own topology (``GET /api/clusters/``);
    the nodes' layouts from the cluster the start is of."""
    topologies: Topologies
    if config.cc_cluster_json:
        topologies = ClusterFiles(config.cc_cluster_json)
    elif client is not None:
        def topologies() -> dict:
            return parse_clusters(client.clusters())
    else:
        def topologies() -> dict:
            return {}
    multi = config.multi_cluster()

    def layouts(cluster: str) -> dict:
        return layouts_of(local.nodes(cluster if multi else None))

    return Renumbering(topologies, layouts,
                       record=partial(outbox.store.set_state, STATE_KEY),
                       unmapped=recorder.resources_unmapped)


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


def token_source(config: Config) -> TokenSource:
    """ccRestJwt, or ccRestJwtFile read again when it changes (raises ConfigError naming
    the key when it cannot be read at start)."""
    if config.cc_rest_jwt_file:
        return TokenSource(config.rest_jwt, config.cc_rest_jwt_file, "ccRestJwtFile")
    return TokenSource(config.rest_jwt)


def _runner(config: Config, on_command: Callable[[str, float, bool], None],
            retries: RetryPolicies, stop: StopFlag) -> SlurmRunner:
    """Slurm commands, each told to ``on_command`` when it ends, cut short by ``stop``."""
    return SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout,
                       retry=retries.slurm, sessions=SESSIONS, on_command=on_command,
                       stopping=stop)


def both(first: Callable[..., None], second: Callable[..., object]) -> Callable[..., None]:
    """One callback that calls two with the same arguments."""
    def call(*args: Any, **kwargs: Any) -> None:
        first(*args, **kwargs)
        second(*args, **kwargs)

    return call
