"""Whether a CONFIGURING job's StartTime is final, so that the fast path can send its start at
once instead of waiting for slurmctld to end CONFIGURING.

A job is CONFIGURING from its allocation until its PrologSlurmctld has exited (the hook runs
in it) or its nodes have booted. slurmctld resets StartTime only in the second case, once the
nodes are up (job_mgr.c job_config_fini, for a job flagged JOB_POWER_UP_NODE: 22.05.8
:9146-9160, 24.11.5 :9027, 26.05.3 :9303). That flag is set while slurmctld allocates the
nodes, before any ``scontrol show job`` can be answered, and only where it may boot them:
nodes powered down (power saving, CLOUD nodes), a node features plugin that reboots nodes,
or the job's own ``--reboot`` (``formats.text.parse_node_boot``, ``ControllerJob.reboot``).
On a cluster with none of these, which the test bed and most sites are, the StartTime a
CONFIGURING job shows is the run's: waiting for CONFIGURING to end cost every start the time
slurmctld takes to reap the prolog (60-70 ms p50, 130-180 ms p95 after the hook's message on
the scale test bed), and a second question to slurmctld where it was asked too early.

slurmctld's config can change under a running daemon (``scontrol reconfigure``), so it is
read again when the last reading is older than :data:`CONFIG_MAX_AGE`; an unreadable config
counts as "nodes may boot" (the slower, always right way)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ccadapter.errors import CcAdapterError
from ccadapter.slurm.formats.records import ControllerJob
from ccadapter.slurm.formats.text import parse_node_boot

log = logging.getLogger(__name__)

CONFIG_MAX_AGE = 60.0  # seconds a reading of slurmctld's config is trusted


class NodeBoot:
    """What slurmctld's config says about booting nodes for jobs, read by ``read_config``
    (``scontrol show config``) at most every ``max_age`` seconds."""

    def __init__(self, read_config: Callable[[], str], *, max_age: float = CONFIG_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read_config = read_config
        self.max_age = max_age
        self.clock = clock
        self.settings: tuple[str, ...] | None = None  # the boot settings set; None: unknown
        self._read_at: float | None = None

    @property
    def may_boot(self) -> bool:
        """The last reading, without asking slurmctld: True until the config was read."""
        return self.settings is None or bool(self.settings)

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
            settings = parse_node_boot(self._read_config())
        except CcAdapterError as exc:
            log.warning("slurmctld's config could not be read (%s): starts of CONFIGURING "
                        "jobs wait until they run", exc)
            settings = None
        if settings != self.settings:
            if settings == ():
                log.info("slurmctld boots no nodes for jobs (SuspendProgram, ResumeProgram, "
                         "NodeFeaturesPlugins unset): a CONFIGURING job's start is sent at once")
            elif settings:
                log.info("slurmctld may boot nodes for jobs (%s set): a CONFIGURING job's "
                         "start waits until it runs", ", ".join(settings))
        self.settings = settings
        return self.may_boot
