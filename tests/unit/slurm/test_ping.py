"""``scontrol ping`` as every version prints it (recorded by tests/testbed/record_ping.py),
and the rule that names the controller in control."""

from pathlib import Path

import pytest

from ccadapter.errors import SlurmCommandError, SlurmParseError
from ccadapter.slurm.collector import Collector, CollectorSettings
from ccadapter.slurm.formats.ping import ControllerPing, in_control, parse_ping, same_host
from ccadapter.slurm.runner import Completed
from tests.conftest import VERSIONS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
P, B = "primary", "backup"

# version, scenario -> (mode, host, up) per line, and the host in control
EXPECTED = {
    **{(v, "single"): ([(P, "vm", True)], "vm") for v in VERSIONS},
    # every version but 22.05 (whose two controllers are clusterha's, below): a second
    # SlurmctldHost where none answers
    **{(v, "backup-down"): ([(P, "vm", True), (B, "ha-ghost", False)], "vm")
       for v in VERSIONS if v != "22.05"},
    # clusterha: both up (the primary in control), after `scontrol takeover` (the primary
    # slurmctld exits), and the moment between, when neither answers
    ("22.05", "primary"): ([(P, "vm", True), (B, "ha-backup", True)], "vm"),
    ("22.05", "takeover"): ([(P, "vm", False), (B, "ha-backup", True)], "ha-backup"),
    ("22.05", "both-down"): ([(P, "vm", False), (B, "ha-backup", False)], None),
}


@pytest.mark.parametrize(("version", "scenario"), sorted(EXPECTED))
def test_recorded_ping(version, scenario):
    text = (FIXTURES / version / f"scontrol-ping-{scenario}.txt").read_text()
    lines, holder = EXPECTED[(version, scenario)]
    pings = parse_ping(text, version)
    assert pings == [ControllerPing(*line) for line in lines]
    assert in_control(pings) == holder


def test_every_version_has_a_recording():
    assert {v for v, _ in EXPECTED} == set(VERSIONS)


def test_more_backups_and_the_banner_are_read():
    text = ("Slurmctld(primary) at a is DOWN\nSlurmctld(backup1) at b is DOWN\n"
            "Slurmctld(backup2) at c.example.org is UP\n" + "*" * 41 + "\n")
    pings = parse_ping(text)
    assert [p.mode for p in pings] == ["primary", "backup1", "backup2"]
    assert in_control(pings) == "c.example.org"


def test_not_ping_output_is_an_error_naming_the_version():
    with pytest.raises(SlurmParseError, match=r"Slurm 24\.11, `scontrol ping`"):
        parse_ping("scontrol: error: something else\n", "24.11")


def test_host_names_compare_short_and_without_case():
    assert same_host("CTLD1", "ctld1.example.org")
    assert not same_host("ctld1", "ctld10")


class PingRunner:
    def __init__(self, done: Completed) -> None:
        self.done = done
        self.argv: list[list[str]] = []

    def unchecked(self, argv, **_):
        self.argv.append(list(argv))
        return self.done


def test_collector_reads_ping_whatever_its_exit_status():
    text = (FIXTURES / "22.05" / "scontrol-ping-both-down.txt").read_text()
    runner = PingRunner(Completed(text, "", 1))  # scontrol ping exits 1 when none is up
    pings = Collector(runner, CollectorSettings()).controllers()
    assert runner.argv == [["scontrol", "ping"]]
    assert [p.up for p in pings] == [False, False]


def test_collector_ping_that_fails_names_the_command():
    runner = PingRunner(Completed("", "scontrol: error: Unable to open slurm.conf", 1))
    with pytest.raises(SlurmCommandError, match=r"scontrol ping: exit status 1.*slurm\.conf"):
        Collector(runner, CollectorSettings()).controllers()
