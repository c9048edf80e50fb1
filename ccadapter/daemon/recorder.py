"""What the components tell the metrics, without the metrics: the :class:`Recorder` callbacks
``app.build`` hands out and :class:`NoMetrics`, which does nothing with them.

Apart from ``ccadapter.daemon.metrics`` so that a daemon without ``metricsListen`` never
imports prometheus_client (and the HTTP server modules it brings): about 1.5 MB of RSS and
10 ms of its start that nothing would read (BENCHMARKS.md, "What the hook and the daemon
cost the controller host"). ``app.build`` imports the metrics module only when they are on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from ccadapter.model import EventKind
from ccadapter.outbox import Event, Result
from ccadapter.outbox.store import Store

T = TypeVar("T")


class MetricsEndpoint(Protocol):
    """The ``/metrics`` HTTP endpoint (``metrics.MetricsServer``), until :meth:`stop`."""

    @property
    def port(self) -> int: ...
    def stop(self) -> None: ...


class OutboxStats(Protocol):
    """An outbox whose figures are read at scrape time (``admin.stats`` of its store)."""

    @property
    def store(self) -> Store: ...



class Recorder(Protocol):
    """The callbacks app.build hands to the components; :class:`Metrics` records them."""

    def events_enqueued(self, kind: EventKind, count: int) -> None: ...
    def delivery_result(self, event: Event, result: Result) -> None: ...
    def nats_result(self, event: Event, result: Result) -> None: ...
    def slurm_command(self, command: str, seconds: float, ok: bool,
                      cluster: str = "") -> None: ...
    def cc_request(self, endpoint: str, status: int, seconds: float) -> None: ...
    def hook_received(self, cluster: str = "") -> None: ...
    def hook_dropped(self, reason: str) -> None: ...
    def hook_unknown(self, cluster: str = "") -> None: ...
    def fast_path_paced(self, cluster: str, paced: bool) -> None: ...
    def resources_unmapped(self, cluster: str, reason: str) -> None: ...
    def cluster_served(self, cluster: str, served: bool) -> None: ...
    def role(self, role: str) -> None: ...
    def observed(self, name: str, cycle: Callable[[], T], cluster: str = "") -> Callable[[], T]: ...
    def watch_outbox(self, outbox: OutboxStats) -> None: ...
    def serve(self, host: str, port: int) -> MetricsEndpoint | None: ...


class NoMetrics:
    """Metrics switched off (one-shot commands, no ``metricsListen``): the same callbacks,
    doing nothing, so the components need no "if metrics" of their own."""

    def events_enqueued(self, kind: EventKind, count: int) -> None:
        pass

    def delivery_result(self, event: Event, result: Result) -> None:
        pass

    def nats_result(self, event: Event, result: Result) -> None:
        pass

    def slurm_command(self, command: str, seconds: float, ok: bool, cluster: str = "") -> None:
        pass

    def cc_request(self, endpoint: str, status: int, seconds: float) -> None:
        pass

    def hook_received(self, cluster: str = "") -> None:
        pass

    def hook_dropped(self, reason: str) -> None:
        pass

    def hook_unknown(self, cluster: str = "") -> None:
        pass

    def fast_path_paced(self, cluster: str, paced: bool) -> None:
        pass

    def resources_unmapped(self, cluster: str, reason: str) -> None:
        pass

    def cluster_served(self, cluster: str, served: bool) -> None:
        pass

    def role(self, role: str) -> None:
        pass

    def observed(self, name: str, cycle: Callable[[], T], cluster: str = "") -> Callable[[], T]:
        return cycle

    def watch_outbox(self, outbox: OutboxStats) -> None:
        pass

    def serve(self, host: str, port: int) -> MetricsEndpoint | None:
        return None
