"""Command line. The only module that exits the process or prints for humans.

Exit codes: 0 success, 1 a runtime failure (Slurm or cc-backend unreachable, an unreadable
answer, a file that cannot be used, events left undelivered) or a refusal (another process
holds the outbox), 2 bad usage or a bad config (the message names the key). A failure the
environment causes is said on one line (:mod:`ccadapter.problems`), never as a traceback:
every command runs inside :class:`_Commands`, which turns what escapes into that line.
"""

from __future__ import annotations

import json
import logging
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from ccadapter import __version__, clustername
from ccadapter.app import App, LastRuns, build, last_runs, node_state_warnings, outbox_path
from ccadapter.backfill import Backfill, ChunkResult, chunks
from ccadapter.cc.payload import energy_meta_body, start_job_body, stop_job_body
from ccadapter.checks import Identity, startup_warnings
from ccadapter.config import DEFAULT_CONFIG_PATH, Config, load_config, missing_files
from ccadapter.daemon import Routine
from ccadapter.errors import CcAdapterError, ConfigError, FileAccessError, OutboxError
from ccadapter.kinds import EventKind
from ccadapter.lastrun import LastRun
from ccadapter.metrics import MetricsServer
from ccadapter.model import Job
from ccadapter.notify.nats import safe_url
from ccadapter.outbox import Outbox, admin
from ccadapter.pidlock import AlreadyRunning, PidLock
from ccadapter.prep.server import PrepServer
from ccadapter.problems import describe, sqlite_advice
from ccadapter.reconcilers import Reconciler
from ccadapter.reconcilers.events import ignored as is_ignored
from ccadapter.recover import claim, clear_socket, rebuild
from ccadapter.retry import RetryPolicies
from ccadapter.sdnotify import notify, watchdog_interval
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.runner import CommandRunner, SlurmRunner
from ccadapter.slurm.timefmt import parse_when
from ccadapter.statelock import OutboxBusy, StateLock
from ccadapter.status import CycleLog, render_events, render_table, scrub, secret_values
from ccadapter.status import collect as collect_status

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
    """Explicit path: must load. Default path: optional, like cc-slurm-adapter. The config
    is also kept in the click context, for :class:`_Commands` to name keys and hide
    secrets in what it reports."""
    try:
        if config_path is None and not Path(DEFAULT_CONFIG_PATH).exists():
            log.info("no %s, using built-in defaults", DEFAULT_CONFIG_PATH)
            config = Config()
        else:
            config = load_config(config_path or DEFAULT_CONFIG_PATH)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.get_current_context().meta[_CONFIG_KEY] = config
    return config


_CONFIG_KEY = "ccadapter.config"


def _fail(exc: BaseException, prefix: str = "") -> NoReturn:
    """Say ``exc`` on one line (with what to do) and exit: 2 for a bad config, else 1."""
    config = click.get_current_context().meta.get(_CONFIG_KEY)
    click.echo(f"error: {prefix}{describe(exc, config)}", err=True)
    sys.exit(2 if isinstance(exc, ConfigError) else 1)


class _Commands(click.Group):
    """The command group. What the environment makes a command fail with -- our errors, a
    file the system refuses, the outbox's database -- ends here as one line and exit code
    1 instead of a traceback. Anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CcAdapterError, OSError, sqlite3.Error) as exc:
            _fail(exc)


def _slurm_runner(config: Config) -> CommandRunner:
    return SlurmRunner(config.slurm_command_prefix, config.slurm_command_timeout,
                       retry=RetryPolicies.from_config(config).slurm)


@dataclass(frozen=True)
class Deps:
    """What the commands reach the outside world through. Tests pass fakes with
    ``CliRunner.invoke(main, ..., obj=Deps(...))``; the real ones are the defaults."""

    runner: Callable[[Config], CommandRunner] = _slurm_runner
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ccadapter")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """Feed ClusterCockpit's cc-backend with Slurm jobs."""
    ctx.ensure_object(Deps)
    _setup_logging(log_level)


def _config_file(config_path: str | None) -> str | None:
    """The file :func:`_load` read, if any."""
    if config_path is None and Path(DEFAULT_CONFIG_PATH).exists():
        return DEFAULT_CONFIG_PATH
    return config_path


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
@click.option("--cluster", default=None,
              help="Slurm cluster (default: the local one; with slurmClusters, each of them).")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json",
              show_default=True)
@click.pass_obj
def jobs(deps: Deps, config_path: str | None, since: str, until: str | None,
         cluster: str | None, fmt: str) -> None:
    """Show the jobs of a time window as the cc-backend requests they would become.

    A dry run: nothing is sent anywhere. A cluster whose Slurm fails is said on stderr and
    the others are shown; the exit code is then 1.
    """
    config = _load(config_path)
    now = time.time()
    try:
        start = parse_when(since, now)
        end = parse_when(until, now) if until else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    runner = deps.runner(config)
    found, skipped, failed = [], 0, False
    for name in [cluster] if cluster else _served_names(config, runner):
        try:
            result = Collector(runner, config).window(start, end, name)
        except CcAdapterError as exc:
            click.echo(f"error: cluster {name}: {describe(exc, config)}", err=True)
            failed = True
            continue
        found += result.jobs
        skipped += len(result.errors)
    ignore = config.ignore_hosts_pattern()
    views = [_job_view(job, ignore) for job in found]
    if fmt == "json":
        click.echo(json.dumps(views, indent=2, ensure_ascii=False))
    else:
        click.echo(_table(found, views))
    if skipped:
        click.echo(f"{skipped} record(s) skipped, see messages above", err=True)
    if failed:
        sys.exit(1)


def _served_names(config: Config, runner: CommandRunner) -> list[str | None]:
    """The clusters the daemon would serve: the local one (None: no --clusters), the
    names of slurmClusters, or each that `sacctmgr list clusters` names."""
    if not config.multi_cluster():
        return [None]
    if config.slurm_clusters == [clustername.ALL]:
        return list(ClusterList(runner).names())
    return list(config.slurm_clusters)


@contextmanager
def _pid_lock(config: Config) -> Iterator[None]:
    """The daemon's PID file (see :mod:`ccadapter.pidlock` for why it has a lock of its
    own); a second daemon with the same pidFilePath exits 1 naming the first."""
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


@contextmanager
def _outbox_writer(config: Config, config_path: str | None, command: str) -> Iterator[None]:
    """The outbox to ourselves for the whole command (:mod:`ccadapter.statelock`); when
    another process has it, exit 1 naming that process, its config and what to do."""
    lock = StateLock(config.state_dir())
    config_file = _config_file(config_path)
    try:
        lock.acquire(command, config_file)
    except OutboxBusy as exc:
        click.echo(f"error: {_refusal(command, config_file, exc)}", err=True)
        sys.exit(1)
    try:
        yield
    finally:
        lock.release()


def _refusal(command: str, config_file: str | None, busy: OutboxBusy) -> str:
    holder = busy.holder
    if holder.command != "daemon":
        what = "cannot start" if command == "daemon" else f"{command} refused"
        return f"{what}: {busy}; wait until it has finished (or stop it), then run this again"
    if command != "daemon":
        return (f"{command} needs the daemon stopped: {busy}; stop it first (e.g. "
                "`systemctl stop ccadapter`), then run this again")
    if holder.config == (config_file or ""):
        return f"cannot start: {busy}: this daemon runs already (see `ccadapter status`)"
    return (f"cannot start: {busy}: one outbox serves one process; a daemon for another "
            "cluster needs its own lastRunPath (or stateDirectory) in its config")


class _ReadyAfterFirstWindow:
    """systemd's READY=1 once the first Slurm window is in the outbox (Type=notify). With
    several clusters: once every served cluster's first window has run and one of them is
    in the outbox -- a cluster whose Slurm fails must not keep the others from starting
    (systemd would kill the daemon that serves them). A daemon standing by
    (``slurmctldFailover``) is ready once it knows it stands by: it runs no window until
    it takes over, and systemd would kill a start that never ends."""

    def __init__(self, served: Callable[[], list[str | None]],
                 standby: Callable[[], bool] = lambda: False) -> None:
        self.served = served  # the lanes of the served clusters (None: the default mode)
        self.standby = standby
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
        notify(message)


def _require_delivery(config: Config) -> None:
    """A config that cannot deliver jobs is refused before anything starts (exit 2)."""
    if not config.cc_rest_submit_jobs and not config.nats_server:
        _config_exit("ccRestSubmitJobs", "false and natsServer empty leave no way to deliver "
                     "jobs: enable one of them")
    if config.cc_rest_submit_jobs and not config.cc_rest_url:
        _config_exit("ccRestUrl", "needed to deliver jobs (it is empty); or set "
                     "ccRestSubmitJobs to false and deliver over NATS")
    if not config.cc_rest_submit_jobs and not config.nats_jetstream:
        log.warning("ccRestSubmitJobs is false and natsJetStream is off: jobs go out on core "
                    "NATS only, which keeps no message a subscriber misses; set natsJetStream "
                    "to true for delivery that is acknowledged and deduplicated")
    for line in node_state_warnings(config):
        log.warning("%s", line)
    for key, path in missing_files(config):
        if key == "ccRestCaBundle" or (key.startswith("nats") and config.nats_server):
            _config_exit(key, f"file {path} does not exist")


def _config_exit(key: str, message: str) -> None:
    click.echo(f"error: config key {key!r}: {message}", err=True)
    sys.exit(2)


@main.command("daemon")
@_config_option
@click.option("--log-level", default=None,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Overrides the global --log-level (default here: info).")
@click.pass_obj
def daemon_cmd(deps: Deps, config_path: str | None, log_level: str | None) -> None:
    """Run the reconcilers and the delivery until SIGTERM/SIGINT (then exit 0)."""
    logging.getLogger().setLevel((log_level or "info").upper())
    config = _load(config_path)
    _require_delivery(config)
    with _outbox_writer(config, config_path, "daemon"), _pid_lock(config):
        for warning in startup_warnings(config, _config_file(config_path), deps.runner(config),
                                        Identity.current()):
            log.warning("%s", warning)
        try:
            app = build(config, metrics=True)
        except CcAdapterError as exc:
            _fail(exc, "cannot start: ")
        exporter = _serve_metrics(app)
        daemon = app.daemon()
        daemon.heartbeat_interval = watchdog_interval()
        if daemon.heartbeat_interval:
            daemon.heartbeat = lambda: notify("WATCHDOG=1")
        control = app.control
        standby = (lambda: not control.active) if control else (lambda: False)
        daemon.on_cycle = CycleLog(app.outbox,
                                   then=_ReadyAfterFirstWindow(app.lanes, standby))
        server, fast = app.prep(daemon.wake_delivery, lambda: daemon.run_soon("control"))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: daemon.stop())
        app.start_publishing()
        fast.start()
        _listen(server, config)
        log.info("ccadapter %s serving %s (outbox %s)", __version__, _serving(app),
                 outbox_path(config))
        if control:
            log.info("slurmctldFailover: working only while the slurmctld on %s (this host) "
                     "is in control; standing by until scontrol ping says so", control.host)
        daemon.run()
        server.stop()
        fast.stop()
        if exporter:
            exporter.stop()
        app.close()
        log.info("stopped")


def _listen(server: PrepServer, config: Config) -> None:
    """The hook sockets, or exit 2 naming the key of the one that cannot be listened on."""
    try:
        server.start()
    except OSError as exc:
        spec = exc.filename or config.prep_sock_listen_path
        key = ("prepSockListenPath" if spec == config.prep_sock_listen_path
               else "prepSockClusterListenPaths")
        click.echo(f"error: config key '{key}': cannot listen on {spec}: {exc.strerror}",
                   err=True)
        sys.exit(2)


def _serving(app: App) -> str:
    if not app.config.multi_cluster():
        return f"cluster {app.cluster}"
    if app.roster.dynamic:
        return "every cluster `sacctmgr list clusters` names"
    return f"clusters {', '.join(app.roster.names())}"


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
@click.pass_obj
def sync_cmd(deps: Deps, config_path: str | None, once: bool, dry_run: bool,
             only: str | None) -> None:
    """Run the reconcilers once, by hand (the daemon must not be running). A reconciler
    that fails is said and the others run; exit 1 if one failed or events could not be
    delivered now (they wait in the outbox)."""
    if not once:
        raise click.UsageError("only --once is supported; run `ccadapter daemon` to keep going")
    config = _load(config_path)
    if not dry_run:
        _require_delivery(config)
    with nullcontext() if dry_run else _outbox_writer(config, config_path, "sync --once"), \
            tempfile.TemporaryDirectory(prefix="ccadapter-dry-") as tmp:
        failed = _sync_once(config, deps, dry_run, only, Path(tmp))
    if failed:
        sys.exit(1)


def _sync_once(config: Config, deps: Deps, dry_run: bool, only: str | None,
               tmp: Path) -> bool:
    """One cycle; True if anything failed (already said on stderr)."""
    outbox = last_run = None
    if dry_run:  # work on copies: the real outbox and lastRun stay as they are
        outbox = _dry_run_outbox(config, tmp / "outbox.sqlite")
        last_run = _dry_run_last_runs(config, tmp)
    app = _build(config, deps, outbox=outbox, last_run=last_run)
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
        return _report_undelivered(app, summary) or bool(failed)
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
        last_run = LastRun(tmp / clustername.last_run_path("lastrun", scope))
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


def _report_undelivered(app: App, summary: dict[str, Any]) -> bool:
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
        click.echo(f"error: {scrub(line, secret_values(app.config))}", err=True)
    return bool(lines)


def _nats_problem(app: App) -> str:
    if app.publisher is None:
        return "see the messages above"
    return (f"NATS {safe_url(app.publisher.options.url)} (natsServer): "
            f"{app.publisher.last_error or 'no acknowledgement in time'}")


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
        if (energy := energy_meta_body(job)) is not None:  # only where Slurm accounted it
            view["editMeta"] = energy
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
        if "editMeta" in view and not view["ignored"]:
            sent += "+energy"
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


# --- operator commands: status, queue, backfill, recover -------------------------------------

_format_option = click.option("--format", "fmt", type=click.Choice(["json", "table"]),
                              default="table", show_default=True)


@main.command("status")
@_config_option
@_format_option
@click.pass_obj
def status_cmd(deps: Deps, config_path: str | None, fmt: str) -> None:
    """Outbox depth, rejected events, last cycle per reconciler, lock holder, lastRun.

    Read from the files alone: works whether or not the daemon runs, never takes its lock,
    never prints a secret. The JSON shape is documented in the README."""
    config = _load(config_path)
    try:
        doc = collect_status(config, outbox_path(config), deps.clock)
    except (sqlite3.Error, OutboxError) as exc:
        click.echo(f"error: cannot read the outbox {outbox_path(config)}: {exc}; "
                   f"{sqlite_advice(str(exc))}", err=True)
        sys.exit(1)
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False) if fmt == "json"
               else render_table(doc))


@main.group("queue")
def queue() -> None:
    """List, retry or drop the outbox's events (safe while the daemon runs)."""


def _existing_outbox(config: Config) -> Outbox:
    """The outbox, which these commands must not create (a typo in the config would)."""
    path = outbox_path(config)
    if not path.exists():
        click.echo(f"error: no outbox at {path} (stateDirectory): the daemon has not run "
                   "with this config", err=True)
        sys.exit(1)
    return Outbox(path)


def _ids(ids: list[int]) -> str:
    return " ".join(map(str, ids))


@queue.command("list")
@_config_option
@click.option("--status", "status_", default="pending", show_default=True,
              type=click.Choice(["pending", "rejected", "delivered", "all"]))
@click.option("--kind", type=click.Choice([k.value for k in EventKind]), default=None)
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@_format_option
@click.pass_obj
def queue_list(deps: Deps, config_path: str | None, status_: str, kind: str | None,
               limit: int, fmt: str) -> None:
    """The outbox's events, oldest first, without their bodies."""
    config = _load(config_path)
    outbox = _existing_outbox(config)
    try:
        rows = admin.list_events(outbox.store, None if status_ == "all" else status_, kind, limit)
    finally:
        outbox.close()
    rows = scrub(rows, secret_values(config))
    click.echo(json.dumps(rows, indent=2, ensure_ascii=False) if fmt == "json"
               else render_events(rows, deps.clock()))


@queue.command("retry")
@_config_option
@click.argument("ids", nargs=-1, type=int)
@click.option("--all-rejected", is_flag=True, help="Every rejected event.")
def queue_retry(config_path: str | None, ids: tuple[int, ...], all_rejected: bool) -> None:
    """Make events due now: rejected ones (after a fix in cc-backend) and pending ones
    waiting for their next attempt. Exit 1 if a given id was not retried."""
    if bool(ids) == all_rejected:
        raise click.UsageError("give event ids or --all-rejected (not both)")
    config = _load(config_path)
    outbox = _existing_outbox(config)
    try:
        with _outbox_writer(config, config_path, "queue retry"):
            done = admin.requeue(outbox.store, None if all_rejected else ids)
    finally:
        outbox.close()
    click.echo(f"{len(done)} event(s) due now" + (f": {_ids(done)}" if done else ""))
    if missed := sorted(set(ids) - set(done)):
        click.echo(f"error: not retried (no such event, or delivered: use `backfill "
                   f"--resend` to send a delivered job again): {_ids(missed)}", err=True)
        sys.exit(1)


@queue.command("drop")
@_config_option
@click.argument("ids", nargs=-1, type=int)
@click.option("--all-rejected", is_flag=True, help="Every rejected event.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def queue_drop(deps: Deps, config_path: str | None, ids: tuple[int, ...],
               all_rejected: bool, yes: bool) -> None:
    """Give up on undelivered events: they are never sent. Takes explicit ids or
    --all-rejected; there is deliberately no way to drop every pending event at once.

    Dropped events stay in the outbox as done, so overlapping Slurm windows do not
    enqueue them again."""
    if bool(ids) == all_rejected:
        raise click.UsageError("give event ids or --all-rejected (not both)")
    config = _load(config_path)
    outbox = _existing_outbox(config)
    try:
        with _outbox_writer(config, config_path, "queue drop"):
            done = _drop_confirmed(outbox, ids, all_rejected, yes, secret_values(config),
                                   deps.clock())
    finally:
        outbox.close()
    if done is not None:
        click.echo(f"{len(done)} event(s) dropped" + (f": {_ids(done)}" if done else ""))


def _drop_confirmed(outbox: Outbox, ids: tuple[int, ...], all_rejected: bool, yes: bool,
                    secrets: list[str], now: float) -> list[int] | None:
    """Show the events, ask, drop; None when there was nothing to drop."""
    rows = (admin.list_events(outbox.store, "rejected", None, 1_000_000) if all_rejected
            else admin.events_by_id(outbox.store, ids))
    if bad := sorted(set(ids) - {r["id"] for r in rows if r["status"] != "delivered"}):
        click.echo(f"error: nothing dropped: no such undelivered event: {_ids(bad)}",
                   err=True)
        sys.exit(1)
    if not rows:
        click.echo("no rejected events: nothing to drop")
        return None
    click.echo(render_events(scrub(rows, secrets), now))
    if not yes:
        click.confirm(f"Drop these {len(rows)} event(s)? They will never be sent",
                      abort=True)
    return admin.drop(outbox.store, [r["id"] for r in rows])


def _build(config: Config, deps: Deps, **kwargs: Any) -> App:
    """The app of a one-shot command, its clusters listed (``["*"]``) or exit 1."""
    try:
        app = build(config, runner=deps.runner(config), **kwargs)
        app.refresh_clusters()
    except CcAdapterError as exc:
        _fail(exc, "cannot start: ")
    return app


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


@main.command("backfill")
@_config_option
@click.option("--since", required=True, help="Range start: 2d, 12h, @EPOCH or an ISO time.")
@click.option("--until", default=None, help="Range end (default: now).")
@click.option("--chunk-hours", type=click.FloatRange(min=0, min_open=True), default=6.0,
              show_default=True, help="Hours of Slurm history per sacct query.")
@click.option("--resend", is_flag=True,
              help="Also send again what was delivered (cc-backend lost it).")
@click.option("--no-deliver", is_flag=True,
              help="Only enqueue; the daemon delivers when it starts.")
@click.pass_obj
def backfill_cmd(deps: Deps, config_path: str | None, since: str, until: str | None,
                 chunk_hours: float, resend: bool, no_deliver: bool) -> None:
    """Put the job runs of a past time range into the outbox (what it holds already is
    not sent twice), then deliver. The daemon must be stopped."""
    config = _load(config_path)
    if not no_deliver:
        _require_delivery(config)
    now = deps.clock()
    try:
        spans = chunks(parse_when(since, now), parse_when(until, now) if until else now,
                       chunk_hours * 3600)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    with _outbox_writer(config, config_path, "backfill"):
        app = _build(config, deps)
        try:
            for sync in app.syncs:
                job = Backfill(sync.collector, app.outbox, config.ignore_hosts_pattern(),
                               resend)
                _backfill_report(_run_chunks(job, spans, sync.scope), sync.scope)
            undelivered = not no_deliver and _deliver_and_report(app)
        finally:
            app.close()
    if undelivered:
        sys.exit(1)


def _run_chunks(job: Backfill, spans: list[tuple[float, float]],
                cluster: str | None = None) -> list[ChunkResult]:
    """Chunk by chunk: a bar on a terminal, a line per chunk otherwise (logs, pipes).
    ``cluster``: named in every line where slurmClusters names clusters."""
    done: list[ChunkResult] = []
    of = "" if cluster is None else f" of cluster {cluster}"

    def one(since: float, until: float) -> ChunkResult:
        try:
            result = job.run_chunk(since, until)
        except CcAdapterError as exc:
            config = click.get_current_context().meta.get(_CONFIG_KEY)
            click.echo(f"error: chunk {_iso(since)} .. {_iso(until)}{of}: "
                       f"{describe(exc, config)}; the chunks before it are in the outbox: "
                       f"continue with --since @{since:.0f}", err=True)
            sys.exit(1)
        done.append(result)
        return result

    if sys.stdout.isatty():
        with click.progressbar(spans, label=f"backfill{of}", show_pos=True) as bar:
            for since, until in bar:
                one(since, until)
        return done
    for i, (since, until) in enumerate(spans, 1):
        r = one(since, until)
        click.echo(f"chunk {i}/{len(spans)} {_iso(since)} .. {_iso(until)}{of}: {r.jobs} "
                   f"jobs, {r.events} events, {r.new} new, {r.resent} resent")
    return done


def _backfill_report(results: list[ChunkResult], cluster: str | None = None) -> None:
    total = {f: sum(getattr(r, f) for r in results)
             for f in ("jobs", "events", "new", "resent", "skipped_records")}
    of = "" if cluster is None else f" of cluster {cluster}"
    click.echo(f"backfill{of} {_iso(results[0].since)} .. {_iso(results[-1].until)}: "
               f"{total['jobs']} job runs, {total['events']} events, {total['new']} new, "
               f"{total['resent']} resent")
    if total["skipped_records"]:
        click.echo(f"{total['skipped_records']} record(s) skipped, see messages above",
                   err=True)


def _deliver_and_report(app: App) -> bool:
    """Deliver, say what happened; True if events were left for later (said on stderr)."""
    done = app.deliver_once()
    left = admin.stats(app.outbox.store)["pending"]
    nats = (f", {done['nats']['published']} published on NATS" if "nats" in done else "")
    click.echo(f"delivered {done['delivered']}, rejected {done['rejected']}{nats}, "
               f"{left} pending (the daemon retries them)")
    return _report_undelivered(app, done)


@main.command("recover")
@_config_option
@click.option("--stale-wait", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds between stale-jobs' two listings of the open runs.")
@click.pass_obj
def recover_cmd(deps: Deps, config_path: str | None, stale_wait: float) -> None:
    """Clean start: remove a stale PID file and hook socket, rebuild the running jobs
    from cc-backend and Slurm, deliver. Refuses while the daemon runs."""
    config = _load(config_path)
    _require_delivery(config)
    lock = PidLock(config.pid_file_path)
    try:
        actions = claim(lock)
    except CcAdapterError as exc:
        _fail(exc, "recover refused: ")
    try:
        with _outbox_writer(config, config_path, "recover"):
            actions += _clear_socket(config)
            for line in actions or ["no stale PID file, no stale socket"]:
                click.echo(line)
            app = _build(config, deps)
            steps: dict[str, dict[str, Any]] = {}

            def report(step: str, summary: dict[str, Any]) -> None:
                steps[step] = summary
                click.echo(f"{step}: {json.dumps(summary)}")

            try:
                rebuild(app, stale_wait, deps.sleep, report)
                undelivered = _report_undelivered(app, steps["delivery"])
            finally:
                app.close()
    finally:
        lock.release()
    if undelivered:
        sys.exit(1)


def _clear_socket(config: Config) -> list[str]:
    """Stale UNIX sockets at prepSockListenPath and at each prepSockClusterListenPaths."""
    specs = [("prepSockListenPath", config.prep_sock_listen_path),
             *(("prepSockClusterListenPaths", spec)
               for spec in config.prep_sock_cluster_listen_paths.values())]
    done = []
    for key, spec in specs:
        try:
            done += clear_socket(spec)
        except ValueError as exc:
            click.echo(f"error: config key '{key}': {exc}", err=True)
            sys.exit(2)
        except OSError as exc:
            _fail(FileAccessError(key, "remove", spec, exc))
    return done
