"""The operator's commands: ``check-config``, ``status``, ``queue list|retry|drop``,
``backfill`` and ``recover``."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from ccadapter.cli.base import (
    CommandExit,
    Deps,
    build_app,
    config_option,
    format_option,
    iso,
    load,
    main,
    outbox_writer,
    require_delivery,
)
from ccadapter.cli.run import report_undelivered
from ccadapter.cli.tables import render_events, render_table
from ccadapter.config.keys import Config
from ccadapter.config.rules import missing_files
from ccadapter.config.secrets import scrub
from ccadapter.config.views import outbox_path
from ccadapter.daemon.app import App
from ccadapter.errors import CcAdapterError, FileAccessError, OutboxError
from ccadapter.model import EventKind
from ccadapter.ops.backfill import Backfill, ChunkResult, chunks
from ccadapter.ops.checks import Identity, config_problems
from ccadapter.ops.recover import claim, clear_socket, rebuild
from ccadapter.ops.status import collect as collect_status
from ccadapter.outbox import DeliveryStatus, Outbox, admin
from ccadapter.report.problems import sqlite_advice
from ccadapter.runtime.pidlock import PidLock
from ccadapter.slurm.timefmt import parse_when


@main.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--user", default="cc-slurm-adapter", show_default=True,
              help="The daemon's user (the unit's User=): it must read every file.")
@click.option("--group", default="slurm", show_default=True,
              help="The daemon's group (the unit's Group=).")
def check_config(path: str, user: str, group: str) -> None:
    """Validate a config file: its keys, the files and groups it names, and that the
    daemon's user can read them; exit 2 naming the first bad key."""
    config = load(path)
    problems = [(key, f"file {file} does not exist") for key, file in missing_files(config)]
    try:
        who: Identity | None = Identity.service(user, group)
    except KeyError:
        who = None
        click.echo(f"note: user {user} or group {group} does not exist here: whether the "
                   "daemon can read its files was not checked (--user, --group)", err=True)
    problems += config_problems(config, path, who)
    for key, message in problems:
        click.echo(f"error: config key {key!r}: {message}", err=True)
    if problems:
        raise CommandExit(code=2)
    click.echo(json.dumps(config.redacted(), indent=2))
    click.echo(f"{path}: OK", err=True)


@main.command("status")
@config_option
@format_option
@click.pass_obj
def status_cmd(deps: Deps, config_path: str | None, fmt: str) -> None:
    """Outbox depth, rejected events, last cycle per reconciler, lock holder, lastRun.

    Read from the files alone: works whether or not the daemon runs, never takes its lock,
    never prints a secret. The README shows the JSON's shape; ARCHITECTURE.md each field."""
    config = load(config_path)
    try:
        doc = collect_status(config, outbox_path(config), deps.clock)
    except (sqlite3.Error, OutboxError) as exc:
        raise CommandExit(f"cannot read the outbox {outbox_path(config)}: {exc}; "
                          f"{sqlite_advice(str(exc))}") from None
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False) if fmt == "json"
               else render_table(doc))


@main.group("queue")
def queue() -> None:
    """List, retry or drop the outbox's events (safe while the daemon runs)."""


def _existing_outbox(config: Config, read_only: bool = False) -> Outbox:
    """The outbox, which these commands must not create (a typo in the config would);
    ``read_only``: as it is, for a command that only reads (:meth:`Outbox.reader`)."""
    path = outbox_path(config)
    if not path.exists():
        raise CommandExit(f"no outbox at {path} (stateDirectory): the daemon has not run "
                          "with this config")
    return Outbox.reader(path) if read_only else Outbox(path)


def _ids(ids: list[int]) -> str:
    return " ".join(map(str, ids))


@queue.command("list")
@config_option
@click.option("--status", "status_", default=DeliveryStatus.PENDING.value, show_default=True,
              type=click.Choice([s.value for s in (DeliveryStatus.PENDING,
                                 DeliveryStatus.REJECTED, DeliveryStatus.DELIVERED)] + ["all"]))
@click.option("--kind", type=click.Choice([k.value for k in EventKind]), default=None)
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@format_option
@click.pass_obj
def queue_list(deps: Deps, config_path: str | None, status_: str, kind: str | None,
               limit: int, fmt: str) -> None:
    """The outbox's events, oldest first, without their bodies."""
    config = load(config_path)
    outbox = _existing_outbox(config, read_only=True)
    try:
        status = None if status_ == "all" else DeliveryStatus(status_)
        rows = admin.list_events(outbox.store, status, kind, limit)
    finally:
        outbox.close()
    rows = scrub(rows, config.secret_values())
    click.echo(json.dumps(rows, indent=2, ensure_ascii=False) if fmt == "json"
               else render_events(rows, deps.clock()))


@contextmanager
def _changing(config_path: str | None, command: str, ids: tuple[int, ...],
              all_rejected: bool) -> Iterator[tuple[Config, Outbox]]:
    """What ``queue retry`` and ``queue drop`` change: given ids or every rejected event
    (one of the two), in the outbox that exists, held for ``command`` meanwhile."""
    if bool(ids) == all_rejected:
        raise click.UsageError("give event ids or --all-rejected (not both)")
    config = load(config_path)
    outbox = _existing_outbox(config)
    try:
        with outbox_writer(config, config_path, command):
            yield config, outbox
    finally:
        outbox.close()


@queue.command("retry")
@config_option
@click.argument("ids", nargs=-1, type=int)
@click.option("--all-rejected", is_flag=True, help="Every rejected event.")
def queue_retry(config_path: str | None, ids: tuple[int, ...], all_rejected: bool) -> None:
    """Make events due now: rejected ones (after a fix in cc-backend) and pending ones
    waiting for their next attempt. Exit 1 if a given id was not retried."""
    with _changing(config_path, "queue retry", ids, all_rejected) as (_, outbox):
        done = admin.requeue(outbox.store, None if all_rejected else ids)
    click.echo(f"{len(done)} event(s) due now" + (f": {_ids(done)}" if done else ""))
    if missed := sorted(set(ids) - set(done)):
        raise CommandExit(f"not retried (no such event, or delivered: use `backfill "
                          f"--resend` to send a delivered job again): {_ids(missed)}")


@queue.command("drop")
@config_option
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
    with _changing(config_path, "queue drop", ids, all_rejected) as (config, outbox):
        done = _drop_confirmed(outbox, ids, all_rejected, yes, config.secret_values(),
                               deps.clock())
    if done is not None:
        click.echo(f"{len(done)} event(s) dropped" + (f": {_ids(done)}" if done else ""))


def _drop_confirmed(outbox: Outbox, ids: tuple[int, ...], all_rejected: bool, yes: bool,
                    secrets: list[str], now: float) -> list[int] | None:
    """Show the events, ask, drop; None when there was nothing to drop."""
    rows = (admin.list_events(outbox.store, DeliveryStatus.REJECTED, None, 1_000_000)
            if all_rejected
            else admin.events_by_id(outbox.store, ids))
    if bad := sorted(set(ids) - {r["id"] for r in rows if r["status"] != DeliveryStatus.DELIVERED}):
        raise CommandExit(f"nothing dropped: no such undelivered event: {_ids(bad)}")
    if not rows:
        click.echo("no rejected events: nothing to drop")
        return None
    click.echo(render_events(scrub(rows, secrets), now))
    if not yes:
        click.confirm(f"Drop these {len(rows)} event(s)? They will never be sent",
                      abort=True)
    return admin.drop(outbox.store, [r["id"] for r in rows])


@main.command("backfill")
@config_option
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
    config = load(config_path)
    if not no_deliver:
        require_delivery(config)
    now = deps.clock()
    try:
        spans = chunks(parse_when(since, now), parse_when(until, now) if until else now,
                       chunk_hours * 3600)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    with outbox_writer(config, config_path, "backfill"):
        app = build_app(config, deps)
        try:
            for sync in app.syncs:
                job = Backfill(sync.collector, app.outbox, config.ignore_hosts_pattern(),
                               resend)
                _backfill_report(_run_chunks(job, spans, sync.scope), sync.scope)
                if sync.last_run.get() is None:
                    # No daemon has run here: its first window would reach back
                    # slurmPollInterval from its own start, and runs that ended between
                    # this range's end and then would never be read.
                    sync.last_run.set(spans[-1][1])
            undelivered = not no_deliver and _deliver_and_report(app)
        finally:
            app.close()
    if undelivered:
        raise CommandExit()


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
            raise CommandExit(
                f"chunk {iso(since)} .. {iso(until)}{of}: ", cause=exc,
                then=f"; the chunks before it are in the outbox: continue with --since "
                     f"@{since:.0f}") from None
        done.append(result)
        return result

    if sys.stdout.isatty():
        with click.progressbar(spans, label=f"backfill{of}", show_pos=True) as bar:
            for since, until in bar:
                one(since, until)
        return done
    for i, (since, until) in enumerate(spans, 1):
        r = one(since, until)
        click.echo(f"chunk {i}/{len(spans)} {iso(since)} .. {iso(until)}{of}: {r.jobs} "
                   f"jobs, {r.events} events, {r.new} new, {r.resent} resent")
    return done


def _backfill_report(results: list[ChunkResult], cluster: str | None = None) -> None:
    total = {f: sum(getattr(r, f) for r in results)
             for f in ("jobs", "events", "new", "resent", "skipped_records")}
    of = "" if cluster is None else f" of cluster {cluster}"
    click.echo(f"backfill{of} {iso(results[0].since)} .. {iso(results[-1].until)}: "
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
    return report_undelivered(app, done)


@main.command("recover")
@config_option
@click.option("--stale-wait", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds between stale-jobs' two listings of the open runs.")
@click.pass_obj
def recover_cmd(deps: Deps, config_path: str | None, stale_wait: float) -> None:
    """Clean start: remove a stale PID file and hook socket, rebuild the running jobs
    from cc-backend and Slurm, deliver. Refuses while the daemon runs."""
    config = load(config_path)
    require_delivery(config)
    lock = PidLock(config.pid_file_path)
    try:
        actions = claim(lock)
    except CcAdapterError as exc:
        raise CommandExit("recover refused: ", cause=exc) from None
    try:
        with outbox_writer(config, config_path, "recover"):
            actions += _clear_socket(config)
            for line in actions or ["no stale PID file, no stale socket"]:
                click.echo(line)
            app = build_app(config, deps)
            steps: dict[str, dict[str, Any]] = {}

            def report(step: str, summary: dict[str, Any]) -> None:
                steps[step] = summary
                click.echo(f"{step}: {json.dumps(summary)}")

            try:
                rebuild(app, stale_wait, deps.sleep, report)
                undelivered = report_undelivered(app, steps["delivery"])
            finally:
                app.close()
    finally:
        lock.release()
    if undelivered:
        raise CommandExit()


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
            raise CommandExit.config_key(key, str(exc)) from None
        except OSError as exc:
            raise CommandExit(cause=FileAccessError(key, "remove", spec, exc)) from None
    return done
