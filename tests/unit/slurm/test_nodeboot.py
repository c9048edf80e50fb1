"""When a CONFIGURING job's StartTime counts as final: slurmctld's config, read again as it
ages (an admin may turn power saving on under a running daemon)."""

import logging

from ccadapter.errors import SlurmCommandError
from ccadapter.model import Shared
from ccadapter.slurm.formats.records import ControllerJob
from ccadapter.slurm.nodeboot import NodeBoot

NO_BOOT = ("SLURM_VERSION           = 24.11.5\nSuspendProgram          = (null)\n"
           "ResumeProgram           = (null)\nNodeFeaturesPlugins     = (null)\n")
POWER_SAVING = NO_BOOT.replace("ResumeProgram           = (null)",
                               "ResumeProgram           = /usr/local/sbin/resume")


def job(reboot: bool = False) -> ControllerJob:
    return ControllerJob(job_id=7, state="CONFIGURING", start_time="1795602930", batch=True,
                         shared=Shared.NONE, nodes=(), text="JobId=7", reboot=reboot)


class Config:
    """slurmctld's config as ``scontrol show config`` answers it, counted."""

    def __init__(self, text: str | Exception) -> None:
        self.text, self.reads = text, 0

    def __call__(self) -> str:
        self.reads += 1
        if isinstance(self.text, Exception):
            raise self.text
        return self.text


def test_the_config_is_read_again_once_it_is_older_than_max_age(caplog):
    caplog.set_level(logging.INFO, "ccadapter.slurm.nodeboot")
    now = [0.0]
    config = Config(NO_BOOT)
    boot = NodeBoot(config, max_age=60, clock=lambda: now[0])
    assert boot.may_boot  # nothing read yet
    assert boot.start_final(job()) and not boot.may_boot
    assert not boot.start_final(job(reboot=True))  # its own --reboot
    now[0] = 59.0
    config.text = POWER_SAVING  # scontrol reconfigure, power saving on
    assert boot.start_final(job()) and config.reads == 1  # the reading still holds
    now[0] = 60.0
    assert not boot.start_final(job()) and config.reads == 2
    assert boot.settings == ("ResumeProgram",)
    said = [r.getMessage() for r in caplog.records]
    assert "sent at once" in said[0] and "ResumeProgram set" in said[1] and len(said) == 2


def test_an_unreadable_config_means_nodes_may_boot(caplog):
    config = Config(SlurmCommandError(["scontrol", "show", "config"], "exit code 1",
                                      "Unable to contact slurm controller"))
    boot = NodeBoot(config)
    assert not boot.start_final(job()) and boot.may_boot
    assert "could not be read" in caplog.text
    garbled = NodeBoot(Config("slurm_load_ctl_conf error\n"))  # no key of a config at all
    assert not garbled.start_final(job()) and garbled.settings is None


def test_a_failure_of_any_kind_means_nodes_may_boot(caplog):
    """The startup reading runs outside the fast path's guard: nothing may escape it."""
    boot = NodeBoot(Config(TimeoutError("hung")))
    assert boot.refresh() and boot.may_boot
    assert "could not be read (hung)" in caplog.text


def test_slurm_26_05_always_waits(caplog):
    caplog.set_level(logging.INFO, "ccadapter.slurm.nodeboot")
    now = [0.0]
    boot = NodeBoot(Config(NO_BOOT.replace("24.11.5", "26.05.3")), clock=lambda: now[0])
    assert not boot.start_final(job()) and boot.settings is None
    now[0] = 100.0
    assert not boot.start_final(job())
    assert [r.getMessage() for r in caplog.records if "PowerAction" in r.getMessage()] \
        and len(caplog.records) == 1  # said once


def test_the_config_the_daemon_read_at_its_start_is_the_first_reading():
    now = [0.0]
    config = Config(POWER_SAVING)
    boot = NodeBoot(config, known=NO_BOOT, max_age=10, clock=lambda: now[0])
    assert not boot.may_boot and boot.start_final(job()) and config.reads == 0
    now[0] = 10.0
    assert not boot.start_final(job()) and config.reads == 1
