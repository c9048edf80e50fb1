"""The operator's line for a failure the environment causes: what failed, which key or
address, what to do; one line, no secret."""

import errno
import sqlite3

import pytest

from ccadapter.config.keys import Config
from ccadapter.errors import (
    FileAccessError,
    OutboxError,
    SlurmCommandError,
    SlurmParseError,
    TransientSlurmError,
)
from ccadapter.report.problems import describe

JWT = "jwt-0123456789abcdef"


@pytest.fixture
def config(tmp_path):
    return Config(lastRunPath=str(tmp_path / "lib" / "lastrun"),
                  pidFilePath=str(tmp_path / "run" / "daemon.pid"), ccRestJwt=JWT,
                  natsPassword="nats-pass-42")


@pytest.mark.parametrize(("exc", "says"), [
    (SlurmCommandError(["sacct", "-V"], "cannot run /opt/slurm/bin/sacct: No such file"),
     "Slurm's client commands are not found on this host: install them, or set "
     "slurmCommandPrefix"),
    (TransientSlurmError(["squeue"], "no answer within 60 s (killed)"),
     "slurmctld or slurmdbd do not answer"),
    (SlurmCommandError(["sacct"], "exit code 1", "sacct: error: Problem talking\nto db\n"),
     "sacct: exit code 1: sacct: error: Problem talking | to db; check that this command"),
    (SlurmParseError("24.11", "sacct --json", "no field 'jobs'"), "please report it"),
    (OutboxError("/s/outbox.sqlite", "database or disk is full"),
     "outbox /s/outbox.sqlite: database or disk is full; free space on the file system of "
     "stateDirectory"),
])
def test_our_errors_get_what_to_do(config, exc, says):
    line = describe(exc, config)
    assert says in line and "\n" not in line


def test_os_errors_name_the_key_of_the_path(config, tmp_path):
    denied = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "lib"))
    assert describe(denied, config) == (
        f"config key 'stateDirectory': {tmp_path}/lib: Permission denied; run as the "
        "daemon's user (or root), or give that user access")
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "lib" / "lastrun"))
    assert describe(full, config).startswith("config key 'lastRunPath': ")
    assert describe(full, config).endswith("free space on that file system")
    pid_dir = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "run"))
    assert describe(pid_dir, config).startswith(f"config key 'pidFilePath': {tmp_path}/run")
    assert "ReadWritePaths" in describe(pid_dir, config)
    other = PermissionError(errno.EACCES, "Permission denied", "/etc/elsewhere")
    assert describe(other, config).startswith("/etc/elsewhere: Permission denied; ")


def test_outbox_database_errors_name_the_file(config, tmp_path):
    line = describe(sqlite3.DatabaseError("file is not a database"), config)
    assert line.startswith(f"the outbox {tmp_path}/lib/outbox.sqlite: file is not a database; ")
    assert "move it aside" in line
    line = describe(sqlite3.OperationalError("attempt to write a readonly database"), config)
    assert "may write stateDirectory" in line


def test_secrets_never_show(config):
    exc = FileAccessError("ccRestCaBundle", "read", f"/x/{JWT}", OSError(errno.EACCES, "x"))
    assert JWT not in describe(exc, config) and "<redacted>" in describe(exc, config)
    exc = SlurmCommandError(["sacct"], "exit code 1", "bad password nats-pass-42")
    assert "nats-pass-42" not in describe(exc, config)
