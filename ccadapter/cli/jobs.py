"""``jobs``: a time window of Slurm as the cc-backend requests it would become (a dry run)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from ccadapter.cc.payload import energy_meta_body, start_job_body, stop_job_body
from ccadapter.cli.base import CommandExit, Deps, config_option, load, main, served_names
from ccadapter.cli.tables import jobs_table
from ccadapter.errors import CcAdapterError
from ccadapter.model import Job
from ccadapter.problems import describe
from ccadapter.reconcilers.events import ignored as is_ignored
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.timefmt import parse_when


@main.command("jobs")
@config_option
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
    config = load(config_path)
    now = time.time()
    try:
        start = parse_when(since, now)
        end = parse_when(until, now) if until else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    runner = deps.runner(config)
    settings = CollectorSettings.from_config(config)
    found, skipped, failed = [], 0, False
    for name in [cluster] if cluster else served_names(config, runner):
        try:
            result = Collector(runner, settings).window(start, end, name)
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
        click.echo(jobs_table(found, views))
    if skipped:
        click.echo(f"{skipped} record(s) skipped, see messages above", err=True)
    if failed:
        raise CommandExit()


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
