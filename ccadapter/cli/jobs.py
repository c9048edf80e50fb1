"""``jobs``: a time window of Slurm as the cc-backend requests it would become (a dry run)."""

from __future__ import annotations

import json
from typing import Any

import click

from ccadapter.cc.payload import energy_meta_body, start_job_body, stop_job_body
from ccadapter.cli.base import CommandExit, Deps, config_option, load, main, served_names
from ccadapter.cli.tables import jobs_table
from ccadapter.errors import CcAdapterError
from ccadapter.model import Job
from ccadapter.reconcilers.lifecycle import ignored as is_ignored
from ccadapter.report.problems import describe
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

    A dry run: nothing is sent anywhere. Any error (a cluster whose Slurm fails, a record
    that cannot be read) is said on stderr, naming the cluster, and nothing is printed on
    stdout: a partial list would read as complete. The exit code is then 1.
    """
    config = load(config_path)
    now = deps.clock()
    try:
        start = parse_when(since, now)
        end = parse_when(until, now) if until else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    runner = deps.runner(config)
    settings = CollectorSettings.from_config(config)
    found, failed = [], False
    for name in [cluster] if cluster else served_names(config, runner):
        collector = Collector(runner, settings)
        label = name or "the local cluster (scontrol show config)"
        try:
            label = name or collector.cluster_name_cached()  # the local cluster's own name
            result = collector.window(start, end, name)
        except CcAdapterError as exc:
            click.echo(f"error: cluster {label}: {describe(exc, config)}", err=True)
            failed = True
            continue
        if result.errors:
            click.echo(f"error: cluster {label}: {len(result.errors)} record(s) could not be "
                       f"read (said above)", err=True)
            failed = True
        found += result.jobs
    if failed:  # nothing on stdout: the list would be incomplete
        raise CommandExit()
    ignore = config.ignore_hosts_pattern()
    views = [_job_view(job, ignore) for job in found]
    if fmt == "json":
        click.echo(json.dumps(views, indent=2, ensure_ascii=False))
    else:
        click.echo(jobs_table(found, views))


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
