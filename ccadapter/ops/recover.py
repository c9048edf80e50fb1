"""recover: a clean start after a crash, a killed daemon or a restored machine.

1. The PID lock is taken for the whole recovery, so no daemon starts in the middle of it.
   A PID file naming a live process is never touched: either that is the daemon (it holds
   the lock) or something else (cc-slurm-adapter, which uses the same default path, or a
   reused PID), and in both cases the operator decides. A PID file naming a dead process
   is stale and is replaced by ours, then removed when recover ends.
2. A UNIX socket at prepSockListenPath (or at one of prepSockClusterListenPaths) is stale
   once we hold the lock: it is removed. Anything else at that path (a file, a directory)
   is reported and left alone.
3. The running jobs are rebuilt from both sides, for every served cluster: cc-cache
   compares cc-backend's running jobs with Slurm (ends it missed are sent, starts it lost
   are sent again), and stale-jobs lists the runs our outbox holds open twice,
   ``stale_wait`` seconds apart, to stop those slurmdbd shows ended (the second listing
   catches ends slurmdbd recorded in between: it receives them from slurmctld with a
   delay).
4. What that enqueued is delivered once; what cannot be delivered now stays in the outbox
   for the daemon.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccadapter.daemon.app import App
from ccadapter.errors import CcAdapterError
from ccadapter.prep.hook import parse_spec
from ccadapter.runtime.pidlock import PidLock, pid_alive


class Refused(CcAdapterError):
    """Recovery would step on a live process."""


def claim(lock: PidLock) -> list[str]:
    """Take the daemon's lock for the recovery; returns what was done to get it."""
    old = lock.holder()
    if old is not None and old != os.getpid() and pid_alive(old):
        owners = lock.lock_owners()
        if owners is None or old in owners:  # without /proc/locks: assume the daemon
            raise Refused(f"the daemon is running (PID {old}): stop it first, e.g. "
                          "`systemctl stop ccadapter`")
        raise Refused(f"PID {old} in {lock.pid_path} is alive but does not hold ccadapter's "
                      "lock (cc-slurm-adapter, which uses the same default PID file? a "
                      "reused PID?): stop that process, or remove the PID file by hand")
    lock.acquire()  # AlreadyRunning: a daemon holds the lock but its PID file is gone
    if old is None:
        return []
    return [f"stale PID file {lock.pid_path} (PID {old} not alive) replaced; "
            "it is removed when recover ends"]


def clear_socket(spec: str) -> list[str]:
    """Remove a UNIX socket left at prepSockListenPath. Only call while holding the lock."""
    family, address = parse_spec(spec)
    if family != socket.AF_UNIX:
        return []  # a TCP port leaves nothing behind
    path = Path(str(address))
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return []
    if not stat.S_ISSOCK(mode):
        return [f"{path} is not a socket: left alone (the daemon cannot listen there)"]
    path.unlink()
    return [f"stale socket {path} removed"]


def rebuild(app: App, stale_wait: float, sleep: Callable[[float], None],
            report: Callable[[str, dict[str, Any]], None]) -> None:
    """Steps 3 and 4, for every served cluster; ``report`` gets each step's summary as it
    finishes (its name carries the cluster where slurmClusters names clusters)."""
    syncs = app.syncs
    for sync in syncs:
        if "cc-cache" in sync.reconcilers:  # jobs go over REST (not NATS alone)
            report(_step("cc-cache", sync.scope), sync.reconcilers["cc-cache"].run_once())
    for sync in syncs:
        report(_step("stale-jobs (first poll)", sync.scope),
               sync.reconcilers["stale-jobs"].run_once())
    sleep(stale_wait)
    for sync in syncs:
        report(_step("stale-jobs (second poll)", sync.scope),
               sync.reconcilers["stale-jobs"].run_once())
    report("delivery", app.deliver_once())


def _step(name: str, cluster: str | None) -> str:
    return name if cluster is None else f"{name} [{cluster}]"
