"""The failover role: which daemon works, decided from ``scontrol ping``."""

import json

import pytest

from ccadapter.daemon.control import STATE_KEY, Control, Role
from ccadapter.errors import ConfigError, SlurmCommandError
from ccadapter.slurm.formats.ping import ControllerPing


class Pings:
    """scontrol ping's answers, one per check (or an error)."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def controllers(self):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return [ControllerPing("primary" if i == 0 else "backup", host, up)
                for i, (host, up) in enumerate(answer)]


BOTH_UP = [("ctld1", True), ("ctld2", True)]
TAKEN_OVER = [("ctld1", False), ("ctld2", True)]
NONE_UP = [("ctld1", False), ("ctld2", False)]


def control(host, *answers):
    changes, saved = [], {}
    c = Control(Pings(*answers), host, record=saved.__setitem__, on_change=changes.append,
                clock=lambda: 100.0)
    return c, changes, saved


def test_standby_until_the_first_check_then_the_first_controller_up_works():
    primary, changes, _ = control("ctld1", BOTH_UP, TAKEN_OVER, BOTH_UP)
    backup, backup_changes, _ = control("ctld2.example.org", BOTH_UP, TAKEN_OVER, BOTH_UP)
    assert not primary.active and not backup.active  # nothing sent before the first check
    roles = []
    for _ in range(3):
        primary.run_once()
        backup.run_once()
        roles.append((primary.role, backup.role))
    assert roles == [(Role.ACTIVE, Role.STANDBY), (Role.STANDBY, Role.ACTIVE),
                     (Role.ACTIVE, Role.STANDBY)]
    assert changes == [Role.ACTIVE, Role.STANDBY, Role.ACTIVE]
    assert backup_changes == [Role.ACTIVE, Role.STANDBY]  # standby at start is no change


def test_none_answering_keeps_the_role():
    c, changes, saved = control("ctld2", TAKEN_OVER, NONE_UP, NONE_UP)
    c.run_once()
    summary = c.run_once()
    assert c.role is Role.ACTIVE and changes == [Role.ACTIVE]
    assert summary["inControl"] is None
    assert json.loads(saved[STATE_KEY])["role"] == "active"


def test_a_failing_ping_keeps_the_role_and_is_recorded():
    c, _, saved = control("ctld1", BOTH_UP, SlurmCommandError(["scontrol", "ping"], "timed out"))
    c.run_once()
    with pytest.raises(SlurmCommandError):
        c.run_once()
    record = json.loads(saved[STATE_KEY])
    assert c.role is Role.ACTIVE
    assert record["role"] == "active" and "timed out" in record["error"]


def test_a_host_that_is_no_slurmctldhost_is_a_config_error():
    c, changes, saved = control("login1", BOTH_UP)
    with pytest.raises(ConfigError, match=r"slurmctldHostName.*'login1'.*ctld1, ctld2"):
        c.run_once()
    assert c.role is Role.STANDBY and changes == []
    assert "slurmctldHostName" in json.loads(saved[STATE_KEY])["error"]


def test_view_says_role_host_and_holder():
    c, _, saved = control("ctld2", TAKEN_OVER)
    c.run_once()
    assert json.loads(saved[STATE_KEY]) == {
        "role": "active", "since": 100.0, "host": "ctld2", "inControl": "ctld2",
        "checkedAt": 100.0, "error": None}
