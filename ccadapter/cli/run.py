"""``daemon`` and ``sync --once``: the reconcilers and the delivery, for good or once."""

from __future__ import annotations

import json
import logging
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click

from ccadapter import __version__
from ccadapter.cli.base import (
    CommandExit,
    Deps,
    LogLevels,
    build_app,
    config_file,
    config_option,
    load,
    main,
    outbox_writer,
    pid_lock,
    require_delivery,
    set_log_levels,
)
from ccadapter.config.keys import Config
from ccadapter.config.secrets import safe_url, scrub
from ccadapter.config.views import outbox_path
from ccadapter.daemon.app import App
from ccadapter.daemon.build import build
from ccadapter.daemon.cluster_sync import LastRuns, last_runs
from ccadapter.daemon.loop import Routine
from ccadapter.daemon.recorder import MetricsEndpoint
from ccadapter.errors import CcAdapterError
from ccadapter.model import last_run_path
from ccadapter.ops.checks import Identity, config_problems, startup_warnings
from ccadapter.ops.status import CycleLog
from ccadapter.outbox import Outbox, admin
from ccadapter.prep.server import PrepServer
from ccadapter.reconcilers import Reconciler
from ccadapter.report.problems import describe
from ccadapter.runtime.lastrun import LastRun
from ccadapter.runtime.sdnotify import notify, watchdog_interval
from ccadapter.runtime.watchdog import Watchdog

log = logging.getLogger("ccadapter")

RECONCILERS = ("slurm-window", "slurm-lookback", "stale-jobs", "cc-cache", "lost-stops",
               "nodestate")


class _ReadyAfterFirstWindow:
    """systemd's READY=1 once the first Slurm window is in the outbox (Type=notify). With
    several clusters: once every served cluster's first window has run and one of them is
    in the outbox -- a cluster whose Slurm fails must not keep the others from starting
    (systemd would kill the daemon that serves them). A daemon standing by
    (``slurmctldFailover``) is ready once it knows it stands by: it runs no window until
    it takes over, and systemd would kill a start that never ends."""

    def __init__(self, served: Callable[[], list[str | None]],
                 standby: Callable[[], bool] = lambda: False,
                 on_ready: Callable[[], None] = lambda: None) -> None:
        self.served = served  # the lanes of the served clusters (None: the default mode)
        self.standby = standby
        self.on_ready = on_ready
        self.sent = False
        self.ran: dict[str | None, bool] = {}  # lane -> its first window succeeded
        self._lock = threading.Lock()  # called from every cluster's lane

    def __call__(self, routine: Routine) -> None:
        if routine.name == "control":
            if routine.last_error is None and self.standby():
                self._send("READY=1\nSTATUS=standby: another host's slurmctld is in control")
            return
        if routine.name != "slurm-window":
            return
        with self._lock:
            self.ran[routine.cluster] = self.ran.get(routine.cluster, False) or \
                routine.last_error is None
            served = self.served()
            ready = bool(served) and all(c in self.ran for c in served) and \
                any(self.ran[c] for c in served)
        if ready:
            self._send("READY=1\nSTATUS=first Slurm window synced")

    def _send(self, message: str) -> None:
        with self._lock:
            if self.sent:
                return
            self.sent = True
        self.on_ready()
        notify(message)


class _StartTimeout:
    """Until READY=1 (or a stop): systemd's start timeout (TimeoutStartSec, 90 s by default)
    pushed back, every ``every`` seconds, by three times that, from the very start of the
    daemon on: its start-up asks Slurm (a slurmdbd busy after a downtime answers late) and its
    first window may catch up days of history; both take longer than any start timeout, yet
    move (a hung daemon is the watchdog's)."""

    def __init__(self, every: float = 20.0) -> None:
        self.every = every
        self._done = threading.Event()
        self.status = "starting: reading Slurm's configuration"

    def start(self) -> _StartTimeout:
        threading.Thread(target=self._extend, name="start-timeout", daemon=True).start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _extend(self) -> None:
        while not self._done.is_set():
            notify(f"EXTEND_TIMEOUT_USEC={int(self.every * 3e6)}\nSTATUS={self.status}")
            if self._done.wait(self.every):
                return


@main.command("daemon")
@config_option
@click.option("--log-level", default=None, type=LogLevels(),
              help="Overrides the global --log-level (default here: info; the journal then "
                   "gets a summary every 10 minutes, not a line per cycle or event).")
@click.pass_obj
def daemon_cmd(deps: Deps, config_path: str | None, log_level: dict[str, str] | None) -> None:
    """Run the reconcilers and the delivery until SIGTERM/SIGINT (then exit 0)."""
    set_log_levels(log_level or {"": "INFO"})
    config = load(config_path)
    require_delivery(config)
    # what check-config refuses of the host (a group that does not exist), refused alike
    for key, message in config_problems(config, config_file(config_path) or "", None):
        raise CommandExit.config_key(key, message)
    starting = _StartTimeout().start()
    with outbox_writer(config, config_path, "daemon"), pid_lock(config):
        for warning in startup_warnings(config, config_file(config_path), deps.runner(config),
                                        Identity.current()):
            log.warning("%s", warning)
        try:
            runner = deps.daemon_runner(config) if deps.daemon_runner else None
            app = build(config, metrics=True, runner=runner, clock=deps.daemon_clock)
        except CcAdapterError as exc:
            raise CommandExit("cannot start: ", cause=exc) from None
        exporter = _serve_metrics(app)
        daemon = app.daemon()
        watchdog = _watchdog(app)
        control = app.control
        standby = (lambda: not control.active) if control else (lambda: False)
        ready = _ReadyAfterFirstWindow(app.lanes, standby, on_ready=starting.stop)
        daemon.on_cycle = CycleLog(app.outbox, then=ready)
        starting.status = "first Slurm window: reading what Slurm ran since lastRun"
        server, fast = app.prep(daemon.wake_delivery, lambda: daemon.run_soon("control"))
        daemon.stop_on_signals()
        app.start_publishing()
        fast.start()
        _listen(server, config)
        log.info("ccadapter %s serving %s (outbox %s)", __version__, _serving(app),
                 outbox_path(config))
        if control:
            log.info("slurmctldFailover: working only while the slurmctld on %s (this host) "
                     "is in control; standing by until scontrol ping says so", control.host)
        daemon.run()
        starting.stop()
        server.stop()
        fast.stop()
        if exporter:
            exporter.stop()
        if watchdog:
            watchdog.stop()
        app.close()
        log.info("stopped")


def _watchdog(app: App) -> Watchdog | None:
    """systemd's watchdog (WatchdogSec=), fed while the daemon moves; None without one. A
    Slurm command or cc-backend request ends within its timeout, so two command timeouts
    and a half-minute without any progress mean the daemon is stuck."""
    interval = watchdog_interval()
    if not interval:
        return None
    stall = 2 * app.config.slurm_command_timeout + 30
    return Watchdog(lambda: notify("WATCHDOG=1"), interval, stall, app.liveness).start()


def _listen(server: PrepServer, config: Config) -> None:
    """The hook sockets, or exit 2 naming the key of the one that cannot be listened on."""
    try:
        server.start()
    except OSError as exc:
        spec = exc.filename or config.prep_sock_listen_path
        key = ("prepSockListenPath" if spec == config.prep_sock_listen_path
               else "prepSockClusterListenPaths")
        raise CommandExit.config_key(key, f"cannot listen on {spec}: {exc.strerror}") from None


def _serving(app: App) -> str:
    if not app.config.multi_cluster():
        return f"cluster {app.cluster}"
    if app.roster.dynamic:
        return "every cluster `sacctmgr list clusters` names"
    return f"clusters {', '.join(app.roster.names())}"


def _serve_metrics(app: App) -> MetricsEndpoint | None:
    try:
        return app.serve_metrics()
    except OSError as exc:
        raise CommandExit.config_key("metricsListen", f"cannot listen on "
                                     f"{app.config.metrics_listen}: {exc.strerror}") from None


@main.command("sync")
@config_option
@click.option("--once", is_flag=True, help="One cycle of each reconciler, then deliver.")
@click.option("--dry-run", is_flag=True,
              help="Print the events a cycle would enqueue; store and send nothing.")
@click.option("--only", type=click.Choice(RECONCILERS), default=None,
              help="Run just this reconciler.")
@click.pass_obj
def sync_cmd(deps: Deps, config_path: str | None, once: bool, dry_run: bool,
             only: str | None) -> None:
    """Run the reconcilers once, by hand (the daemon must not be running). A reconciler
    that fails is said and the others run; exit 1 if one failed or events could not be
    delivered now (they wait in the outbox)."""
    if not once:
        raise click.UsageError("only --once is supported; run `ccadapter daemon` to keep going")
    config = load(config_path)
    if not dry_run:
        require_delivery(config)
    with nullcontext() if dry_run else outbox_writer(config, config_path, "sync --once"), \
            tempfile.TemporaryDirectory(prefix="ccadapter-dry-") as tmp:
        failed = _sync_once(config, deps, dry_run, only, Path(tmp))
    if failed:
        raise CommandExit()


def _sync_once(config: Config, deps: Deps, dry_run: bool, only: str | None,
               tmp: Path) -> bool:
    """One cycle; True if anything failed (already said on stderr)."""
    outbox = last_run = None
    if dry_run:  # work on copies: the real outbox and lastRun stay as they are
        outbox = _dry_run_outbox(config, tmp / "outbox.sqlite")
        last_run = _dry_run_last_runs(config, tmp)
    app = build_app(config, deps, outbox=outbox, last_run=last_run)
    try:
        failed = [name for sync in app.syncs for name, rec in sync.reconcilers.items()
                  if only in (None, name) and not _run_reconciler(name, rec, config,
                                                                  sync.scope)]
        if dry_run:
            for ev in admin.changed(app.outbox.store):
                click.echo(json.dumps({"event": ev.kind, "cluster": ev.cluster,
                                       "jobId": ev.job_id, "startTime": ev.start_time,
                                       "body": ev.payload}, ensure_ascii=False))
            return bool(failed)
        summary = app.deliver_once()
        click.echo(json.dumps(summary))
        return report_undelivered(app, summary) or bool(failed)
    finally:
        app.close()


def _dry_run_outbox(config: Config, target: Path) -> Outbox:
    """A copy of the outbox (an empty one if there is none yet) that notes what the cycle
    adds or changes: every one of those events is listed, stops of new runs included."""
    real = outbox_path(config)
    outbox = Outbox.copy_of(real, target) if real.exists() else Outbox(target)
    admin.track_changes(outbox.store)
    return outbox


def _dry_run_last_runs(config: Config, tmp: Path) -> LastRuns:
    """Copies of each cluster's lastRun, made as the dry run asks for them."""
    real = last_runs(config)

    def copy(scope: str | None) -> LastRun:
        last_run = LastRun(tmp / last_run_path("lastrun", scope))
        if (ts := real(scope).get()) is not None:
            last_run.set(ts)
        return last_run

    return copy


def _run_reconciler(name: str, rec: Reconciler, config: Config,
                    cluster: str | None = None) -> bool:
    """One cycle of a reconciler, its summary (or error) as a JSON line; False: failed.
    ``cluster``: the cluster it serves where slurmClusters names them (in the line)."""
    head = {"reconciler": name} if cluster is None else {"reconciler": name,
                                                         "cluster": cluster}
    label = name if cluster is None else f"{name}[{cluster}]"
    try:
        summary = rec.run_once()
    except (CcAdapterError, OSError, sqlite3.Error) as exc:
        line = f"{label}: {describe(exc, config)}"
        click.echo(json.dumps({**head, "error": line}, ensure_ascii=False))
        click.echo(f"error: {line}", err=True)
        return False
    click.echo(json.dumps({**head, **summary}))
    return True


def report_undelivered(app: App, summary: dict[str, Any]) -> bool:
    """After a one-shot delivery: say on one line each what could not be delivered now
    and why; True if anything was left for later."""
    lines = []
    if summary["retry_later"]:
        if app.config.cc_rest_submit_jobs and app.client is not None:
            reason = app.client.last_problem or "see the messages above"
        else:
            reason = _nats_problem(app)
        lines.append(f"events not delivered: {reason}; {admin.stats(app.outbox.store)['pending']} "
                     "event(s) wait in the outbox for the daemon (or the next run)")
    if (nats := summary.get("nats")) and nats["retry_later"]:
        lines.append(f"{nats['retry_later']} NATS notification(s) not published: "
                     f"{_nats_problem(app)}; they wait in the outbox for the daemon (or the "
                     "next run)")
    for line in lines:
        click.echo(f"error: {scrub(line, app.config.secret_values())}", err=True)
    return bool(lines)


def _nats_problem(app: App) -> str:
    if app.publisher is None:
        return "see the messages above"
    return (f"NATS {safe_url(app.publisher.options.url)} (natsServer): "
            f"{app.publisher.last_error or 'no acknowledgement in time'}")
