"""Prometheus metrics: what the daemon is doing, for dashboards and alerts.

One :class:`Metrics` object owns one ``CollectorRegistry``; ``app.build`` makes it (only for
the daemon, only when ``metricsListen`` is set) and hands its bound methods to the components
as callbacks. Components never import this module: each takes an optional callback, so unit
tests and the one-shot commands run without metrics; nor does the daemon unless
``metricsListen`` is set (``ccadapter.daemon.recorder`` holds the callbacks' Protocol and
:class:`~ccadapter.daemon.recorder.NoMetrics`, which does nothing with them).
prometheus_client's global ``REGISTRY`` is never used: two daemons in one test process must
not share counters.

The outbox figures are read from ``outbox.admin.stats()`` when Prometheus scrapes (a custom
collector), not polled: a scrape is the only moment they are needed. Label values are names
from the code (event kinds, Slurm commands, endpoints, reasons), never data from jobs or the
config, so no label can carry a secret or grow without bound; the one exception is
``cluster``, the Slurm cluster a figure belongs to (the local one in the default mode, each
of ``slurmClusters`` otherwise, empty for what concerns no single cluster), which is bounded
by the clusters slurmdbd holds.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import PurePath
from threading import Thread
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from ccadapter.daemon.recorder import MetricsEndpoint, OutboxStats, T
from ccadapter.errors import Stopped
from ccadapter.model import EventKind
from ccadapter.outbox import DeliveryStatus, Event, Result, admin, unparsed
from ccadapter.prep.messages import DropReason

log = logging.getLogger(__name__)

SLURM_COMMANDS = ("sacct", "scontrol", "sacctmgr")  # every command the daemon runs
ROLES = ("active", "standby")  # ccadapter.daemon.control.Role

# Slurm answers in tens of milliseconds on a quiet cluster and in tens of seconds on a busy
# slurmdbd; cc-backend in milliseconds unless something is wrong.
SLURM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

def _counter(registry: CollectorRegistry, name: str, doc: str, labels: list[str], *,
             present: Iterable[tuple[str, ...]]) -> Counter:
    """A counter whose series for the label values in ``present`` exist from the start, at
    0: rate() and increase() see the first event only where the series was there before."""
    counter = Counter(name, doc, labels, registry=registry)
    for values in present:
        counter.labels(*values)
    return counter


@dataclass
class MetricsServer:
    """The HTTP endpoint serving ``/metrics``, until :meth:`stop`."""

    server: WSGIServer
    thread: Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class Metrics:
    """The daemon's metrics; every method is safe to call from any thread."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        self._events(self.registry)
        self._requests(self.registry)
        self._hook(self.registry)
        self._cycles(self.registry)
        self.served = Gauge(
            "ccadapter_cluster_served",
            "1 for each Slurm cluster the daemon serves now (slurmClusters; with [\"*\"] "
            "as sacctmgr last listed them).", ["cluster"], registry=self.registry)
        # One for the daemon, whatever clusters it serves: with slurmctldFailover the
        # daemon beside the slurmctld in control works for all of them (ccadapter.daemon.control).
        self.roles = Gauge(
            "ccadapter_role",
            "1 for the daemon's role, 0 for the other: active (finds and sends jobs) or "
            "standby (slurmctldFailover: another host's slurmctld is in control).",
            ["role"], registry=self.registry)
        # Memory, CPU and open files of the daemon itself: a leak shows here first.
        ProcessCollector(registry=self.registry)

    def _cycles(self, registry: CollectorRegistry) -> None:
        self.cycle_ok = Gauge(
            "ccadapter_reconciler_last_success_timestamp_seconds",
            "Unix time at which the reconciler last finished a cycle without error.",
            ["reconciler", "cluster"], registry=registry)
        self.cycle_seconds = Histogram(
            "ccadapter_reconciler_cycle_duration_seconds",
            "Wall time of one successful reconciler cycle, Slurm commands included.",
            ["reconciler", "cluster"], buckets=SLURM_BUCKETS, registry=registry)
        self.cycle_cpu = Counter(
            "ccadapter_reconciler_cpu_seconds",
            "CPU time of reconciler cycles: the daemon's own and that of the Slurm commands "
            "they ran.", ["reconciler", "cluster"], registry=registry)
        self.cycle_failures = Counter(
            "ccadapter_reconciler_failures",
            "Reconciler cycles that failed (the log line and `ccadapter status` say why); "
            "the reconciler runs again at its next turn.",
            ["reconciler", "cluster"], registry=registry)

    def _events(self, registry: CollectorRegistry) -> None:
        kinds = [(kind,) for kind in EventKind]
        self.enqueued, self.delivered, self.rejected = (
            _counter(registry, f"ccadapter_events_{outcome}", doc, ["kind"], present=kinds)
            for outcome, doc in (
                ("enqueued", "New events stored in the outbox (repeats not counted)."),
                ("delivered", "Events cc-backend accepted (or already had); with "
                              "ccRestSubmitJobs=false, events NATS took."),
                ("rejected", "Events cc-backend refused for good; parked in the outbox."),
            ))
        self.nats = Counter("ccadapter_nats_notifications",
                            "NATS notifications of events cc-backend took, by outcome: "
                            "published, retry (NATS unreachable: waits in the outbox), "
                            "rejected (cannot be encoded or is too large).",
                            ["kind", "outcome"], registry=registry)

    def _requests(self, registry: CollectorRegistry) -> None:
        self.slurm_seconds = Histogram(
            "ccadapter_slurm_command_duration_seconds",
            "Wall time of one Slurm command run (each retry counts), failed ones included.",
            ["command", "cluster"], buckets=SLURM_BUCKETS, registry=registry)
        self.slurm_failures = _counter(
            registry, "ccadapter_slurm_command_failures",
            "Slurm command runs that failed: non-zero exit, timeout, or not startable.",
            ["command", "cluster"], present=[(command, "") for command in SLURM_COMMANDS])
        self.cc_seconds = Histogram(
            "ccadapter_cc_request_duration_seconds",
            "Wall time of one cc-backend request by endpoint and HTTP status "
            "(0: no answer, i.e. connection error or timeout).",
            ["endpoint", "status"], buckets=CC_BUCKETS, registry=registry)

    def _hook(self, registry: CollectorRegistry) -> None:
        self.hook_in = Counter("ccadapter_hook_messages_received",
                               "Valid Prolog/Epilog hook messages read from the socket, by "
                               "the cluster whose fast path took them.",
                               ["cluster"], registry=registry)
        self.hook_drops = _counter(
            registry, "ccadapter_hook_messages_dropped",
            "Hook messages not acted on (the poll catches the job later).", ["reason"],
            present=[(reason.value,) for reason in DropReason])
        self.hook_unknown_jobs = Counter(
            "ccadapter_hook_unknown_jobs",
            "Jobs the hook announced that slurmctld did not show when the fast path asked "
            "(once per id: a repeat is dropped as unknown_job).",
            ["cluster"], registry=registry)
        self.paced = Gauge("ccadapter_fast_path_paced",
                           "1 while slurmctld answers the fast path slowly and it asks one "
                           "part at a time (ccadapter.prep.pace), by cluster.", ["cluster"],
                           registry=registry)
        self.unmapped = _counter(
            registry, "ccadapter_resources_unmapped",
            "Nodes of a start sent in Slurm's numbering (abstract CPU ids, GRES indices) "
            "because cc-backend's topology could not be used for them, by reason "
            "(ccadapter.numbering.translate.Reason).", ["cluster", "reason"], present=[])

    # --- callbacks handed to the components --------------------------------------------

    def events_enqueued(self, kind: EventKind, count: int) -> None:
        self.enqueued.labels(kind).inc(count)

    def delivery_result(self, event: Event, result: Result) -> None:
        """Deliverer's ``on_result``: a retry later is neither delivered nor rejected."""
        if result.status == DeliveryStatus.DELIVERED:
            self.delivered.labels(event.kind).inc()
        elif result.status == DeliveryStatus.REJECTED:
            self.rejected.labels(event.kind).inc()

    def nats_result(self, event: Event, result: Result) -> None:
        """The NATS notifier's ``on_result``."""
        outcome = {DeliveryStatus.DELIVERED: "published",
                   DeliveryStatus.REJECTED: "rejected"}.get(result.status, "retry")
        self.nats.labels(event.kind, outcome).inc()

    def slurm_command(self, command: str, seconds: float, ok: bool, cluster: str = "") -> None:
        name = PurePath(command).name  # a full path in a prefix setup is still "sacct"
        self.slurm_seconds.labels(name, cluster).observe(seconds)
        if not ok:
            self.slurm_failures.labels(name, cluster).inc()

    def cc_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.cc_seconds.labels(endpoint, str(status)).observe(seconds)

    def hook_received(self, cluster: str = "") -> None:
        self.hook_in.labels(cluster).inc()

    def hook_dropped(self, reason: str) -> None:
        self.hook_drops.labels(reason).inc()

    def hook_unknown(self, cluster: str = "") -> None:
        self.hook_unknown_jobs.labels(cluster).inc()

    def fast_path_paced(self, cluster: str, paced: bool) -> None:
        self.paced.labels(cluster).set(int(paced))

    def resources_unmapped(self, cluster: str, reason: str) -> None:
        self.unmapped.labels(cluster, reason).inc()

    def role(self, role: str) -> None:
        for name in ROLES:
            self.roles.labels(name).set(1 if name == role else 0)

    def cluster_served(self, cluster: str, served: bool) -> None:
        """A cluster is served from now on (its series start at zero, so rate() sees its
        first failure) or no longer (its ``ccadapter_cluster_served`` series goes away)."""
        if served:
            self.served.labels(cluster).set(1)
            for command in SLURM_COMMANDS:
                self.slurm_failures.labels(command, cluster)
            self.hook_in.labels(cluster)
        else:
            with suppress(KeyError):
                self.served.remove(cluster)

    def observed(self, name: str, cycle: Callable[[], T], cluster: str = "") -> Callable[[], T]:
        """``cycle`` that records the time of each success and counts failures; those
        propagate unchanged (the daemon logs them), leaving the last success where it was."""
        self.cycle_failures.labels(name, cluster)

        def run() -> T:
            try:
                result = cycle()
            except Stopped:  # cut short by the daemon's stop: no failure
                raise
            except Exception:
                self.cycle_failures.labels(name, cluster).inc()
                raise
            self.cycle_ok.labels(name, cluster).set(self.clock())
            cost = result.get("cost") if isinstance(result, dict) else None
            if cost:  # see ccadapter.daemon.cost
                self.cycle_seconds.labels(name, cluster).observe(cost["seconds"])
                self.cycle_cpu.labels(name, cluster).inc(cost["cpu"] + cost["slurm_cpu"])
            return result

        run.__name__ = name
        return run

    def watch_outbox(self, outbox: OutboxStats) -> None:
        self.registry.register(OutboxCollector(outbox))

    def serve(self, host: str, port: int) -> MetricsEndpoint | None:
        """Serve ``/metrics`` on a daemon thread; raises OSError when it cannot listen."""
        server, thread = start_http_server(port, host, registry=self.registry)
        log.info("serving metrics on http://%s:%d/metrics",
                 f"[{host}]" if ":" in host else host, server.server_address[1])
        return MetricsServer(server, thread)


class OutboxCollector:
    """Outbox depth and the age of its oldest undelivered event, read at scrape time."""

    def __init__(self, outbox: OutboxStats) -> None:
        self.outbox = outbox

    def describe(self) -> Iterable[Metric]:
        return self._families({}, {})

    def collect(self) -> Iterator[Metric]:
        try:
            stats = admin.stats(self.outbox.store)
            records = unparsed.views(self.outbox.store)
        except sqlite3.Error as exc:  # a scrape must not fail with the outbox's trouble
            log.warning("metrics: outbox not readable: %s", exc)
            return iter(())
        return iter(self._families(stats, records))

    @staticmethod
    def _families(stats: dict[str, Any], records: dict[str | None, dict[str, Any]]
                  ) -> list[Metric]:
        counts = stats.get("counts", {})
        pending = GaugeMetricFamily(
            "ccadapter_outbox_pending_events",
            "Events in the outbox not delivered yet (the outbox depth), by kind.",
            labels=["kind"])
        rejected = GaugeMetricFamily(
            "ccadapter_outbox_rejected_events",
            "Events cc-backend refused, parked in the outbox until an operator acts.",
            labels=["kind"])
        for kind in EventKind:
            pending.add_metric([kind], counts.get(f"{kind}:pending", 0))
            rejected.add_metric([kind], counts.get(f"{kind}:rejected", 0))
        age = GaugeMetricFamily(
            "ccadapter_outbox_oldest_pending_age_seconds",
            "Age of the oldest event not delivered yet; 0 when none waits.",
            value=stats.get("oldest_pending_age", 0.0))
        unreadable = GaugeMetricFamily(
            "ccadapter_slurm_unreadable_records",
            "Slurm records that could not be read (the log names the version, command and "
            "field), asked again every cycle until they are, by cluster.",
            labels=["cluster"])
        for record in records.values():
            unreadable.add_metric([str(record["cluster"] or "")], record["count"])
        return [pending, rejected, age, unreadable]
