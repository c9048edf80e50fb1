"""Whether a CONFIGURING job's StartTime is final, so that the fast path can send its start at
once instead of waiting for slurmctld to end CONFIGURING.

A job is CONFIGURING from its allocation until its PrologSlurmctld has exited (the hook runs
in it) and its nodes, where they boot for it, are up. slurmctld resets StartTime only in the
second case, once the nodes are up (``job_config_fini`` in src/slurmctld/job_mgr.c, for a
job flagged JOB_POWER_UP_NODE; 22.05, 24.11 and 26.05 alike). That flag is set while
slurmctld allocates the nodes, under the job write lock, before any ``scontrol show job`` can
be answered, and only where it may boot them: nodes powered down (power saving, CLOUD nodes),
a node features plugin that reboots nodes, or the job's own ``--reboot``
(``formats.text.parse_node_boot``, ``ControllerJob.reboot``). On a cluster with none of these
(the test bed's, for one), the StartTime a CONFIGURING job shows is the run's: waiting for
CONFIGURING to end costs every start the time slurmctld takes to reap the prolog, and a
second question to slurmctld where it was asked too early. From Slurm 26.05 on, slurm.conf's
PowerAction entries can power nodes down and up, and ``scontrol show config`` does not print
them: there the start always waits.

slurmctld's config can change under a running daemon (``scontrol reconfigure`` turning power
saving on), so it is read again when a CONFIGURING job is read and the last reading is older
than :data:`CONFIG_MAX_AGE`; a job whose nodes are powered down in that window would get the
StartTime from before their boot. An unreadable config counts as "nodes may boot" (the
slower, always right way). Only the fast path's thread reads the config (:meth:`NodeBoot.refresh`);
the hook listener reads :attr:`NodeBoot.may_boot`, one attribute."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ccadapter.slurm.formats.records import ControllerJob
from ccadapter.slurm.formats.text import parse_node_boot, parse_slurm_uid

log = logging.getLogger(__name__)

CONFIG_MAX_AGE = 10.0  # seconds a reading of slurmctld's config is trusted


class NodeBoot:
    """What slurmctld's config says about booting nodes for jobs, read by ``read_config``
    (``scontrol show config``) at most every ``max_age`` seconds."""

    def __init__(self, read_config: Callable[[], str], *, known: str = "",
                 max_age: float = CONFIG_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``known``: the config read a moment ago (by the daemon, for the cluster's name),
        taken as the first reading instead of asking slurmctld again."""
        self._read_config = read_config
        self.max_age = max_age
        self.clock = clock
        self.settings: tuple[str, ...] | None = None  # the boot settings set; None: unknown
        # SlurmUser's uid, read from the same config: the hook socket's messages from it are
        # slurmctld's own (ccadapter.prep.peers)
        self.slurm_uid: int | None = None
        self._read_at: float | None = None
        self._said = False  # whether a reading was logged yet
        if known:
            self._read_at = clock()
            self._take(known)

    @property
    def may_boot(self) -> bool:
        """The last reading, without asking slurmctld: True until the config was read."""
        settings = self.settings  # one read: another thread may replace it
        return settings is None or bool(settings)

    def start_final(self, ctl: ControllerJob) -> bool:
        """Whether the StartTime of this CONFIGURING job is the one its run keeps."""
        return not ctl.reboot and not self.refresh()

    def refresh(self) -> bool:
        """:attr:`may_boot`, the config read again where the last reading is too old."""
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.max_age:
            return self.may_boot
        self._read_at = now
        try:
            text = self._read_config()
        except Exception as exc:  # any failure means "may boot": the fast path goes on
            log.warning("slurmctld's config could not be read (%s): starts of CONFIGURING "
                        "jobs wait until they run", exc)
            self.settings = None
            return True
        self._take(text)
        return self.may_boot

    def _take(self, text: str) -> None:
        """A reading of the config: kept, and logged where it says otherwise than before."""
        settings = parse_node_boot(text)
        uid = parse_slurm_uid(text)
        if uid is not None:  # a reading without it keeps the last one
            self.slurm_uid = uid
        if settings != self.settings or not self._said:
            if settings == ():
                log.info("slurmctld boots no nodes for jobs (SuspendProgram, ResumeProgram, "
                         "NodeFeaturesPlugins unset): a CONFIGURING job's start is sent at once")
            elif settings:
                log.info("slurmctld may boot nodes for jobs (%s set): a CONFIGURING job's "
                         "start waits until it runs", ", ".join(settings))
            else:
                log.info("slurmctld's config cannot say whether it boots nodes for jobs "
                         "(Slurm 26.05 or later, whose PowerAction entries it does not show, "
                         "or no SLURM_VERSION line): a CONFIGURING job's start waits until "
                         "it runs")
            self._said = True
        self.settings = settings
