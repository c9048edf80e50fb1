"""The command group and what every command shares: loading the config, the locks, building
the app, and the one way a command ends in failure (:class:`CommandExit`)."""

from __future__ import annotations

import logging
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ccadapter import __version__
from ccadapter.config.keys import Config
from ccadapter.config.load import DEFAULT_CONFIG_PATH, load_config
from ccadapter.config.rules import check_delivery
from ccadapter.daemon.app import App
from ccadapter.daemon.build import build
from ccadapter.errors import CcAdapterError, ConfigError
from ccadapter.model import ALL_CLUSTERS
from ccadapter.report.problems import describe
from ccadapter.retry import RetryPolicies
from ccadapter.runtime.clock import SYSTEM, Clock
from ccadapter.runtime.pidlock import AlreadyRunning, PidLock
from ccadapter.runtime.statelock import OutboxBusy, StateLock
from ccadapter.slurm.clusters import ClusterList
from ccadapter.slurm.runner import CommandRunner, SlurmRunner

log = logging.getLogger("ccadapter")

_CONFIG_KEY = "ccadapter.config"


class CommandExit(Exception):
    """A command ends here: ``message`` (without "error: ", empty when it was said already)
    on stderr, exit ``code``. ``cause``: an error to describe on one line with what to do
    (:mod:`ccadapter.report.problems`) between ``message`` and ``then``; a ConfigError makes the
    code 2."""

    def __init__(self, message: str = "", code: int = 1,
                 cause: BaseException | None = None, then: str = "") -> None:
        super().__init__(message)
        self.message, self.cause, self.then = message, cause, then
        self.code = 2 if isinstance(cause, ConfigError) else code

    @classmethod
    def config_key(cls, key: str, message: str) -> CommandExit:
        """A bad config value: exit 2 naming the key."""
        return cls(f"config key {key!r}: {message}", 2)


class Commands(click.Group):
    """The command group. A :class:`CommandExit` raised anywhere below, and what the
    environment makes a command fail with -- our errors, a file the system refuses, the
    outbox's database -- end here, as one line and an exit code instead of a traceback.
    Anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CommandExit as stop:
            _exit(ctx, stop)
        except (CcAdapterError, OSError, sqlite3.Error) as exc:
            _exit(ctx, CommandExit(cause=exc))


def _exit(ctx: click.Context, stop: CommandExit) -> None:
    text = stop.message
    if stop.cause is not None:
        text += describe(stop.cause, ctx.meta.get(_CONFIG_KEY)) + stop.then
    if text:
        click.echo(f"error: {text}", err=True)
    sys.exit(stop.code)


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
    # the daemon's: its Slurm commands (None: a runner per cluster, counted in the metrics)
    # and its clock (the month-of-life benchmark passes a faster one, tests/bench/life.py)
    daemon_runner: Callable[[Config], CommandRunner] | None = None
    daemon_clock: Clock = SYSTEM


_LEVELS = ("debug", "info", "warning", "error")


class LogLevels(click.ParamType):
    """``LEVEL`` or ``LEVEL,LOGGER=LEVEL,...``: the level of everything, and of some loggers
    on their own, e.g. ``info,ccadapter.daemon=debug`` for the line of every cycle."""

    name = "log-levels"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        levels: dict[str, str] = {}
        for part in str(value).split(","):
            logger, sep, level = part.strip().rpartition("=")
            if level.lower() not in _LEVELS or (sep and not logger):
                self.fail(f"{part.strip()!r} is not LEVEL or LOGGER=LEVEL (levels: "
                          f"{', '.join(_LEVELS)})", param, ctx)
            levels[logger] = level.upper()
        if "" not in levels:
            self.fail("the first part must be the level of everything", param, ctx)
        return levels


def set_log_levels(levels: dict[str, str]) -> None:
    """The root logger's level (key ""), and each named logger's."""
    for logger, level in levels.items():
        logging.getLogger(logger or None).setLevel(level)


def _setup_logging(levels: dict[str, str]) -> None:
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    set_log_levels(levels)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ccadapter")
@click.option("--log-level", default="warning", show_default=True, type=LogLevels(),
              help="debug, info, warning or error; LEVEL,LOGGER=LEVEL,... sets some loggers "
                   "apart (e.g. info,ccadapter.daemon=debug).")
@click.pass_context
def main(ctx: click.Context, log_level: dict[str, str]) -> None:
    """Feed ClusterCockpit's cc-backend with Slurm jobs."""
    ctx.ensure_object(Deps)
    _setup_logging(log_level)


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    help=f"Config file (default {DEFAULT_CONFIG_PATH}; built-in defaults when that is absent).",
)
format_option = click.option("--format", "fmt", type=click.Choice(["json", "table"]),
                             default="table", show_default=True)


def load(config_path: str | None) -> Config:
    """Explicit path: must load. Default path: optional, like cc-slurm-adapter. The config
    is also kept in the click context, for :class:`Commands` to name keys and hide
    secrets in what it reports."""
    try:
        if config_path is None and not Path(DEFAULT_CONFIG_PATH).exists():
            log.info("no %s, using built-in defaults", DEFAULT_CONFIG_PATH)
            config = Config()
        else:
            config = load_config(config_path or DEFAULT_CONFIG_PATH)
    except ConfigError as exc:
        raise CommandExit(str(exc), 2) from None
    click.get_current_context().meta[_CONFIG_KEY] = config
    return config


def config_file(config_path: str | None) -> str | None:
    """The file :func:`load` read, if any."""
    if config_path is None and Path(DEFAULT_CONFIG_PATH).exists():
        return DEFAULT_CONFIG_PATH
    return config_path


def require_delivery(config: Config) -> None:
    """A config that cannot deliver jobs is refused before anything starts (exit 2);
    what it may deliver badly is warned about."""
    try:
        warnings = check_delivery(config)
    except ConfigError as exc:
        raise CommandExit(str(exc), 2) from None
    for line in warnings:
        log.warning("%s", line)


def served_names(config: Config, runner: CommandRunner) -> list[str | None]:
    """The clusters the daemon would serve: the local one (None: no --clusters), the
    names of slurmClusters, or each that `sacctmgr list clusters` names."""
    if not config.multi_cluster():
        return [None]
    if config.slurm_clusters == [ALL_CLUSTERS]:
        return list(ClusterList(runner).names())
    return list(config.slurm_clusters)


def build_app(config: Config, deps: Deps, **kwargs: Any) -> App:
    """The app of a one-shot command, its clusters listed (``["*"]``) or exit 1; it reads
    the time from ``deps.clock``, as the command's other parts do."""
    try:
        app = build(config, runner=deps.runner(config), clock=Clock(now=deps.clock), **kwargs)
        app.refresh_clusters()
    except CcAdapterError as exc:
        raise CommandExit("cannot start: ", cause=exc) from None
    return app


@contextmanager
def pid_lock(config: Config) -> Iterator[None]:
    """The daemon's PID file (see :mod:`ccadapter.runtime.pidlock` for why it has a lock of its
    own); a second daemon with the same pidFilePath exits 1 naming the first."""
    lock = PidLock(config.pid_file_path)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        raise CommandExit(str(exc)) from None
    try:
        yield
    finally:
        lock.release()


@contextmanager
def outbox_writer(config: Config, config_path: str | None, command: str) -> Iterator[None]:
    """The outbox to ourselves for the whole command (:mod:`ccadapter.runtime.statelock`); when
    another process has it, exit 1 naming that process, its config and what to do."""
    lock = StateLock(config.state_dir())
    file = config_file(config_path)
    try:
        lock.acquire(command, file)
    except OutboxBusy as exc:
        raise CommandExit(_refusal(command, file, exc)) from None
    try:
        yield
    finally:
        lock.release()


def _refusal(command: str, file: str | None, busy: OutboxBusy) -> str:
    holder = busy.holder
    if holder.command != "daemon":
        what = "cannot start" if command == "daemon" else f"{command} refused"
        return f"{what}: {busy}; wait until it has finished (or stop it), then run this again"
    if command != "daemon":
        return (f"{command} needs the daemon stopped: {busy}; stop it first (e.g. "
                "`systemctl stop ccadapter`), then run this again")
    if holder.config == (file or ""):
        return f"cannot start: {busy}: this daemon runs already (see `ccadapter status`)"
    return (f"cannot start: {busy}: one outbox serves one process; a daemon for another "
            "cluster needs its own lastRunPath (or stateDirectory) in its config")


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))
