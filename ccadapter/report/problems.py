"""One line for an operator about a failure the environment caused: what failed, which
config key or address, what to do. Pure: ``cli`` prints it and picks the exit code.

Our own errors (:class:`~ccadapter.errors.CcAdapterError`) already name what failed and
the key; here the Slurm ones get what to do. What reaches a command without passing
through one of them -- an ``OSError`` from a file the config names, an ``sqlite3.Error``
from the outbox -- is said with the path and the key it belongs to. Secret values of the
config never appear (cc-backend's answers and exception texts are scrubbed), and a line
is one line: a multi-line text becomes several unrelated journal entries.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ccadapter.config.keys import Config
from ccadapter.config.secrets import scrub
from ccadapter.config.views import outbox_path
from ccadapter.errors import (
    CcAdapterError,
    OutboxError,
    SlurmCommandError,
    SlurmParseError,
    TransientSlurmError,
    UnsupportedSlurmVersion,
    os_advice,
)


def describe(exc: BaseException, config: Config | None) -> str:
    """The operator's line for ``exc`` (without the leading ``error: ``)."""
    if isinstance(exc, CcAdapterError):
        text = f"{exc}{_advice(exc)}"
    elif isinstance(exc, OSError):
        text = _os_line(exc, config)
    elif isinstance(exc, sqlite3.Error):
        where = f"the outbox {outbox_path(config)}" if config else "the outbox"
        text = f"{where}: {exc}; {sqlite_advice(str(exc))}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return scrub(text, config.secret_values()) if config else text


def _advice(exc: CcAdapterError) -> str:
    if isinstance(exc, UnsupportedSlurmVersion):
        return "; this Slurm generation has no parser in this ccadapter version"
    if isinstance(exc, SlurmParseError):
        return "; please report it, with the command's output"
    if isinstance(exc, TransientSlurmError):
        return ("; slurmctld or slurmdbd do not answer: check them (`scontrol ping`, "
                "`sacctmgr show cluster`), or raise slurmCommandTimeout")
    if isinstance(exc, SlurmCommandError):
        if not exc.stderr and "cannot run" in str(exc):
            return ("; Slurm's client commands are not found on this host: install them, or "
                    "set slurmCommandPrefix (e.g. [\"ssh\", \"slurmctld-host\"])")
        return "; check that this command works for the daemon's user on this host"
    if isinstance(exc, OutboxError) and "; " not in str(exc):
        return f"; {sqlite_advice(str(exc))}"
    return ""


def sqlite_advice(message: str) -> str:
    """What to do about an error SQLite reported on the outbox."""
    text = message.lower()
    if "full" in text:
        return "free space on the file system of stateDirectory"
    if "readonly" in text or "unable to open" in text or "permission" in text:
        return ("check that the daemon's user may write stateDirectory and its files (run as "
                "that user, or root)")
    if "not a database" in text or "malformed" in text:
        return ("the file is damaged or is not an outbox: move it aside (the events it holds "
                "are lost; `ccadapter backfill` sends Slurm's history again)")
    if "locked" in text:
        return "another process holds it (`ccadapter status`)"
    return "check stateDirectory"


def _os_line(exc: OSError, config: Config | None) -> str:
    what = exc.strerror or type(exc).__name__
    path = exc.filename
    if path is None:
        return f"{what}; {os_advice(exc)}"
    key = _key_of(str(path), config) if config else None
    where = f"config key {key!r}: {path}" if key else str(path)
    return f"{where}: {what}; {os_advice(exc)}"


def _key_of(path: str, config: Config) -> str | None:
    """The config key that names ``path`` (or the directory it lies in)."""
    files = {"lastRunPath": config.last_run_path, "pidFilePath": config.pid_file_path,
             "prepSockListenPath": config.prep_sock_listen_path.removeprefix("unix:"),
             "ccRestCaBundle": config.cc_rest_ca_bundle,
             "natsCredsFile": config.nats_creds_file,
             "natsNKeySeedFile": config.nats_nkey_seed_file,
             "natsTlsCaFile": config.nats_tls_ca_file,
             "natsTlsCertFile": config.nats_tls_cert_file,
             "natsTlsKeyFile": config.nats_tls_key_file}
    target = Path(path)
    for key, value in files.items():
        if value and target in (Path(value), Path(value + ".lock")):
            return key
    if target == config.state_dir() or target.is_relative_to(config.state_dir()):
        return "stateDirectory"
    for key, value in files.items():  # a directory on the way to one of them
        if value and Path(value).is_relative_to(target):
            return key
    return None
