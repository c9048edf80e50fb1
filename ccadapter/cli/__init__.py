"""Command line. The only package that exits the process or prints for humans.

Exit codes: 0 success, 1 a runtime failure (Slurm or cc-backend unreachable, an unreadable
answer, a file that cannot be used, events left undelivered) or a refusal (another process
holds the outbox), 2 bad usage or a bad config (the message names the key). A failure the
environment causes is said on one line (:mod:`ccadapter.report.problems`), never as a traceback:
every command runs inside :class:`~ccadapter.cli.base.Commands`, which turns a
:class:`~ccadapter.cli.base.CommandExit` and what escapes into that line and the code.

One module per group of commands: :mod:`.run` (daemon, sync), :mod:`.jobs`, :mod:`.ops`
(check-config, status, queue, backfill, recover), :mod:`.unreadable` (the Slurm records that
could not be read); :mod:`.tables` prints for terminals.
"""

from ccadapter.cli import jobs, ops, run, unreadable  # noqa: F401 (they register on main)
from ccadapter.cli.base import Deps, main

__all__ = ["Deps", "main"]
