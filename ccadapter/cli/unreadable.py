"""``ccadapter unreadable list|forget``: the Slurm records the daemon could not read, and
giving them up (:mod:`ccadapter.outbox.unparsed` keeps them and asks them again)."""

from __future__ import annotations

import json

import click

from ccadapter.cli.base import (
    CommandExit,
    Deps,
    config_option,
    format_option,
    iso,
    load,
    main,
    outbox_writer,
)
from ccadapter.config.views import outbox_path
from ccadapter.outbox import Outbox, unparsed
from ccadapter.outbox.unparsed import Unparsed


@main.group("unreadable")
def unreadable() -> None:
    """Slurm records that could not be read: list them, or give them up."""


def _lists(outbox: Outbox, cluster: str | None) -> list[Unparsed]:
    """The unreadable records of every cluster that has some (or of ``cluster``)."""
    out = []
    for scope, name in unparsed.clusters(outbox.store).items():
        if cluster is None or name == cluster:
            out.append(Unparsed(outbox.store, name or "", scope is not None))
    return out


def _outbox(config_path: str | None, read_only: bool) -> tuple[str | None, Outbox]:
    config = load(config_path)
    path = outbox_path(config)
    if not path.exists():
        raise CommandExit(f"no outbox at {path} (stateDirectory): the daemon has not run "
                          "with this config")
    return config_path, Outbox.reader(path) if read_only else Outbox(path)


@unreadable.command("list")
@config_option
@click.option("--cluster", default=None, help="Only this cluster's (with slurmClusters).")
@format_option
@click.pass_obj
def unreadable_list(deps: Deps, config_path: str | None, cluster: str | None,
                    fmt: str) -> None:
    """Each record with when it was first unreadable, how often it was asked again and
    when it is asked next (safe while the daemon runs: reads the outbox only)."""
    _, outbox = _outbox(config_path, read_only=True)
    try:
        rows = [{"cluster": kept.cluster, **entry} for kept in _lists(outbox, cluster)
                for entry in kept.entries()]
        errors = {v["cluster"]: v["lastError"] for v in unparsed.views(outbox.store).values()}
    finally:
        outbox.close()
    if fmt == "json":
        click.echo(json.dumps({"records": rows, "lastError": errors}, indent=2))
        return
    if not rows:
        click.echo("no unreadable Slurm records")
        return
    click.echo(f"{'cluster':<16} {'job':>10} {'unreadable since':<20} {'asked again':>11} "
               f"{'next':<20}")
    for row in rows:
        click.echo(f"{row['cluster']:<16} {row['jobId']:>10} {iso(row['first']):<20} "
                   f"{row['tries']:>11} {iso(row['next']):<20}")
    for name, error in errors.items():
        click.echo(f"latest error ({name}): {error}")
    click.echo(f"{len(rows)} record(s); `ccadapter unreadable forget` gives them up "
               f"(now: {iso(deps.clock())})")


@unreadable.command("forget")
@config_option
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "every", is_flag=True, help="Every unreadable record.")
@click.option("--cluster", default=None, help="Only this cluster's (with slurmClusters).")
def unreadable_forget(config_path: str | None, ids: tuple[int, ...], every: bool,
                      cluster: str | None) -> None:
    """Give up unreadable records: they are not asked again, and their runs are not sent
    (lastRun moved past them when they were kept and is not moved back; `ccadapter
    backfill` over their time sends them once they read). The daemon must be stopped."""
    if bool(ids) == every:
        raise click.UsageError("give job ids or --all (not both)")
    path, outbox = _outbox(config_path, read_only=False)
    config = load(config_path)
    gone: list[int] = []
    try:
        with outbox_writer(config, path, "unreadable forget"):
            for kept in _lists(outbox, cluster):
                gone += kept.forget(None if every else ids)
    finally:
        outbox.close()
    click.echo(f"{len(gone)} unreadable record(s) given up" +
               (f": {' '.join(map(str, sorted(gone)))}" if gone else ""))
    if missed := sorted(set(ids) - set(gone)):
        raise CommandExit(f"not kept as unreadable: {' '.join(map(str, missed))}")

