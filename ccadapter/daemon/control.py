"""Controller failover: of the daemons beside each slurmctld of ``SlurmctldHost``, only the one
beside the slurmctld in control finds and sends jobs; the others stand by.

Which slurmctld is in control is read from ``scontrol ping`` every ``slurmPollInterval``
(:mod:`ccadapter.slurm.formats.ping`: the first that answers, in SlurmctldHost order; a
backup answers a moment before it takes control, which only starts its daemon early) and
compared with this host's name (``slurmctldHostName``, default the host name). A standby
daemon keeps its hook socket and its outbox, and delivers what its outbox already holds (it
found those events while in control and owes them; cc-backend takes a repeat as "already
there"), but runs no reconciler and enqueues nothing. A hook message reaching a standby
daemon means its own slurmctld now runs Prolog/Epilog, i.e. probably took control: it is
dropped (counted as ``standby``) and control is checked at once instead of a cycle later.
When none answers (both down, or the moment of a switch) the role stays as it was.

Taking over, the daemon runs every reconciler at once: slurm-window reads from lastRun minus
``slurmWindowOverlap``, which with one lastRun file shared by the hosts is where the daemon
in control left off, so nothing between its last window and the switch is lost, and what
it already sent comes again as a 422 "already there" at most. The outbox is per host. See
the README's "Controller failover" for the choice of lastRun and what each costs.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from ccadapter.errors import CcAdapterError, ConfigError, OutboxError
from ccadapter.slurm.formats.ping import ControllerPing, in_control, same_host

log = logging.getLogger(__name__)

STATE_KEY = "control"  # the outbox's state entry `ccadapter status` reads


class Role(StrEnum):
    ACTIVE = "active"
    STANDBY = "standby"


class Controllers(Protocol):
    def controllers(self) -> list[ControllerPing]: ...


class Control:
    """The ``control`` routine of a daemon with ``slurmctldFailover``. Starts as standby:
    until the first check says otherwise, sending could duplicate the other host's work."""

    def __init__(self, slurm: Controllers, host: str, *,
                 record: Callable[[str, str], None] | None = None,
                 on_change: Callable[[Role], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """``record(key, value)`` keeps the state for ``status`` (the outbox's
        ``set_state``); ``on_change(role)`` is called on every switch, in the routine."""
        self.slurm = slurm
        self.host = host
        self.record = record
        self.on_change = on_change
        self.clock = clock
        self.role = Role.STANDBY
        self.since = clock()
        self.holder: str | None = None
        self.checked_at: float | None = None
        self.error: str | None = None

    @property
    def active(self) -> bool:
        return self.role is Role.ACTIVE

    def run_once(self) -> dict[str, Any]:
        try:
            pings = self.slurm.controllers()
            self.holder = in_control(pings)
            self._check_host(pings)
        except CcAdapterError as exc:
            self.error = str(exc)
            self._save()
            raise
        self.error = None
        self.checked_at = self.clock()
        if self.holder is not None:
            self._become(Role.ACTIVE if same_host(self.holder, self.host) else Role.STANDBY)
        self._save()
        return {"role": self.role.value, "inControl": self.holder,
                "controllers": {p.host: "UP" if p.up else "DOWN" for p in pings}}

    def _check_host(self, pings: list[ControllerPing]) -> None:
        if not any(same_host(p.host, self.host) for p in pings):
            raise ConfigError("slurmctldHostName", f"this host is {self.host!r}, which is not "
                              f"a SlurmctldHost of slurm.conf ({', '.join(p.host for p in pings)});"
                              " set slurmctldHostName to this host's name there")

    def _become(self, role: Role) -> None:
        if role is self.role:
            return
        self.role, self.since = role, self.clock()
        if role is Role.ACTIVE:
            log.warning("taking over: the slurmctld beside this daemon (%s) is in control; "
                        "catching up from lastRun", self.host)
        else:
            log.warning("standing by: the slurmctld on %s is in control; this daemon sends "
                        "nothing new until its own slurmctld (%s) takes control",
                        self.holder, self.host)
        if self.on_change:
            self.on_change(role)

    def view(self) -> dict[str, Any]:
        """What ``status`` shows (see the README's status JSON)."""
        return {"role": self.role.value, "since": self.since, "host": self.host,
                "inControl": self.holder, "checkedAt": self.checked_at, "error": self.error}

    def _save(self) -> None:
        if self.record is None:
            return
        try:
            self.record(STATE_KEY, json.dumps(self.view()))
        except (sqlite3.Error, OutboxError) as exc:  # status loses a line; the role holds
            log.warning("cannot record the role for `status`: %s", exc)
