"""Command line. The only module that exits the process or prints for humans.

Exit codes: 0 success, 1 a runtime failure (Slurm unreachable, unreadable answer),
2 bad usage or a bad config (the message names the key).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ccadapter import __version__
from ccadapter.app import App, build, outbox_path
from ccadapter.cc.payload import start_job_body, stop_job_body
from ccadapter.config import DEFAULT_CONFIG_PATH, Config, load_config, missing_files
from ccadapter.daemon import Routine
from ccadapter.errors import CcAdapterError, ConfigError
from ccadapter.lastrun import LastRun
from ccadapter.metrics import MetricsServer
from ccadapter.model import Job
from ccadapter.outbox import Outbox
from ccadapter.pidlock import AlreadyRunning, PidLock
from ccadapter.reconcilers.events import ignored as is_ignored
from ccadapter.sdnotify import notify, watchdog_interval
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import SlurmRunner
from ccadapter.slurm.timefmt import parse_when

log = logging.getLogger("ccadapter")

RECONCILERS = ("slurm-window", "slurm-lookback", "stale-jobs", "cc-cache", "nodestate")

_config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    help=f"Config file (default {DEFAULT_CONFIG_PATH}; built-in defaults when that is absent).",
)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper()),
        format="%(levelname)s %(name)s: %(message)s",
    )


def _load(config_path: str | None) -> Config:
    """Explicit path: must load. Default path: optional, like cc-slurm-adapter."""
    try:
        if config_path is None:
            if not Path(DEFAULT_CONFIG_PATH).exists():
                log.info("no %s, using built-in defaults", DEFAULT_CONFIG_PATH)
                return Config()
            config_path = DEFAULT_CONFIG_PATH
        return load_config(config_path)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ccadapter")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def main(log_level: str) -> None:
    """Feed ClusterCockpit's cc-backend with Slurm jobs."""
    _setup_logging(log_level)


@main.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
def check_config(path: str) -> None:
    """Validate a config file; exit 2 naming the first bad key."""
    config = _load(path)
    problems = missing_files(config)
    for key, file in problems:
        click.echo(f"error: config key {key!r}: file {file} does not exist", err=True)
    if problems:
        sys.exit(2)
    click.echo(json.dumps(config.redacted(), indent=2))
    click.echo(f"{path}: OK", err=True)


@main.command("jobs")
@_config_option
@click.option("--since", default="1h", show_default=True,
              help="Window start: 2h, 30m, 1d, @EPOCH or an ISO time.")
@click.option("--until", default=None, help="Window end (default: now).")
@click.option("--cluster", default=None, help="Slurm cluster (default: the local one).")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json",
              show_default=True)
def jobs(config_path: str | None, since: str, until: str | None, cluster: str | None,
         fmt: str) -> None:
    """Show the jobs of a time window as the cc-backend requests they would become.

    A dry run: nothing is sent anywhere.
    """
    config = _load(config_path)
    now = time.time()
    try:
        start = parse_when(since, now)
        end = parse_when(until, now) if until else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    collector = Collector(SlurmRunner(config.slurm_command_prefix,
                                      config.slurm_command_timeout), config)
    try:
        result = collector.window(start, end, cluster)
    except CcAdapterError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    ignore = config.ignore_hosts_pattern()
    views = [_job_view(job, ignore) for job in result.jobs]
    if fmt == "json":
        click.echo(json.dumps(views, indent=2, ensure_ascii=False))
    else:
        click.echo(_table(result.jobs, views))
    if result.errors:
        click.echo(f"{len(result.errors)} record(s) skipped, see messages above", err=True)


@contextmanager
def _pid_lock(config: Config) -> Iterator[None]:
    """One daemon (or manual sync) per config; a second one exits 1 naming the first."""
    lock = PidLock(config.pid_file_path)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    try:
        yield
    finally:
        lock.release()


class _ReadyAfterFirstWindow:
    """systemd's READY=1 once the first Slurm window is in the outbox (Type=notify)."""

    def __init__(self) -> None:
        self.sent = False

    def __call__(self, routine: Routine) -> None:
        if not self.sent and routine.name == "slurm-window" and routine.last_error is None:
            notify("READY=1\nSTATUS=first Slurm window synced")
            self.sent = True


def _require_rest(config: Config) -> None:
    if not config.cc_rest_submit_jobs:
        click.echo("error: config key 'ccRestSubmitJobs': false leaves no way to deliver jobs "
                   "(this version publishes to cc-backend over REST only)", err=True)
        sys.exit(2)
    for key, path in missing_files(config):
        if key == "ccRestCaBundle":
            click.echo(f"error: config key {key!r}: file {path} does not exist", err=True)
            sys.exit(2)
    if config.nats_server:
        log.warning("natsServer is set, but this version does not publish to NATS yet; "
                    "jobs go to cc-backend over REST only")
    if not config.cc_rest_url:
        click.echo("error: config key 'ccRestUrl': needed to deliver jobs (it is empty)",
                   err=True)
        sys.exit(2)


@main.command("daemon")
@_config_option
@click.option("--log-level", default=None,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Overrides the global --log-level (default here: info).")
def daemon_cmd(config_path: str | None, log_level: str | None) -> None:
    """Run the reconcilers and the delivery until SIGTERM/SIGINT (then exit 0)."""
    logging.getLogger().setLevel((log_level or "info").upper())
    config = _load(config_path)
    _require_rest(config)
    with _pid_lock(config):
        try:
            app = build(config, metrics=True)
        except CcAdapterError as exc:
            click.echo(f"error: cannot start: {exc}", err=True)
            sys.exit(1)
        exporter = _serve_metrics(app)
        daemon = app.daemon()
        daemon.heartbeat_interval = watchdog_interval()
        if daemon.heartbeat_interval:
            daemon.heartbeat = lambda: notify("WATCHDOG=1")
        daemon.on_cycle = _ReadyAfterFirstWindow()
        server, fast = app.prep(daemon.wake_delivery)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: daemon.stop())
        fast.start()
        try:
            server.start()
        except OSError as exc:
            click.echo(f"error: config key 'prepSockListenPath': cannot listen on "
                       f"{config.prep_sock_listen_path}: {exc.strerror}", err=True)
            sys.exit(2)
        log.info("ccadapter %s serving cluster %s (outbox %s)", __version__, app.cluster,
                 outbox_path(config))
        daemon.run()
        server.stop()
        fast.stop()
        if exporter:
            exporter.stop()
        app.close()
        log.info("stopped")


def _serve_metrics(app: App) -> MetricsServer | None:
    try:
        return app.serve_metrics()
    except OSError as exc:
        click.echo(f"error: config key 'metricsListen': cannot listen on "
                   f"{app.config.metrics_listen}: {exc.strerror}", err=True)
        sys.exit(2)


@main.command("sync")
@_config_option
@click.option("--once", is_flag=True, help="One cycle of each reconciler, then deliver.")
@click.option("--dry-run", is_flag=True,
              help="Print the events a cycle would enqueue; store and send nothing.")
@click.option("--only", type=click.Choice(RECONCILERS), default=None,
              help="Run just this reconciler.")
def sync_cmd(config_path: str | None, once: bool, dry_run: bool, only: str | None) -> None:
    """Run the reconcilers once, by hand (the daemon must not be running)."""
    if not once:
        raise click.UsageError("only --once is supported; run `ccadapter daemon` to keep going")
    config = _load(config_path)
    if not dry_run:
        _require_rest(config)
    with _pid_lock(config):
        try:
            with tempfile.TemporaryDirectory(prefix="ccadapter-dry-") as tmp:
                _sync_once(config, dry_run, only, Path(tmp))
        except CcAdapterError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)


def _sync_once(config: Config, dry_run: bool, only: str | None, tmp: Path) -> None:
    outbox = last_run = None
    if dry_run:  # work on copies: the real outbox and lastRun stay as they are
        real = Outbox(outbox_path(config))
        outbox = real.snapshot(tmp / "outbox.sqlite")
        real.close()
        last_run = LastRun(tmp / "lastrun")
        if (ts := LastRun(config.last_run_path).get()) is not None:
            last_run.set(ts)
    app = build(config, outbox=outbox, last_run=last_run)
    before = {e.id for e in app.outbox.due(1_000_000)} if dry_run else set()
    for name, rec in app.reconcilers.items():
        if only in (None, name):
            click.echo(json.dumps({"reconciler": name, **rec.run_once()}))
    if dry_run:
        for ev in app.outbox.due(1_000_000):
            if ev.id not in before:
                click.echo(json.dumps({"event": ev.kind, "cluster": ev.cluster,
                                       "jobId": ev.job_id, "startTime": ev.start_time,
                                       "body": ev.payload}, ensure_ascii=False))
    else:
        stats = app.deliverer.run_once()
        click.echo(json.dumps({"delivered": stats.delivered, "retry_later": stats.retried,
                               "rejected": stats.rejected}))
    app.close()


def _job_view(job: Job, ignore: Any) -> dict[str, Any]:
    ignored = is_ignored(job, ignore)
    view: dict[str, Any] = {
        "cluster": job.cluster,
        "jobId": job.job_id,
        "slurmState": job.state,
        "started": job.started,
        "ignored": ignored,
        "startJob": None,
        "stopJob": None,
    }
    if job.started:
        view["startJob"] = start_job_body(job)
        if job.finished:
            view["stopJob"] = stop_job_body(job)
    else:
        view["reason"] = "never started: nothing is sent to cc-backend"
    return view


def _table(jobs_: list[Job], views: list[dict[str, Any]]) -> str:
    head = ("CLUSTER", "JOBID", "ARRAY", "STATE", "USER", "PROJECT", "PARTITION", "START",
            "END", "NODES", "HWT", "ACC", "SHARED", "SENT AS")
    rows = [head]
    for job, view in zip(jobs_, views, strict=True):
        array = f"{job.array_job_id}_{job.array_task_id}" if job.array_task_id is not None else ""
        sent = "ignored" if view["ignored"] else (
            "start+stop" if view["stopJob"] else "start" if view["startJob"] else "never started")
        rows.append((
            job.cluster, str(job.job_id), array, job.state, job.user, job.account,
            job.partition, _ts(job.start_time), _ts(job.end_time),
            ",".join(job.hostnames) or "-", str(job.num_hwthreads), str(job.num_acc),
            job.shared.value, sent,
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _ts(epoch: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"
