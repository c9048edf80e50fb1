"""Which clusters a slurmdbd holds: ``sacctmgr list clusters``, as cc-slurm-adapter asks it at
start (``QueryClusters`` in its ``internal/slurm/v24xx/slurm.go``) for ``slurmClusters: ["*"]``.

The answer's form depends on the generation (22.05's sacctmgr has no ``--json``), so the
installed generation is asked once (``sacctmgr -V``) and its format module names the
arguments and reads the answer (``CLUSTER_LIST_ARGS``, ``parse_cluster_list``). A slurmdbd
keeps a cluster in this list from ``sacctmgr add cluster`` (or the first registration of its
slurmctld) until ``sacctmgr delete cluster``, whether its slurmctld runs or not.
"""

from __future__ import annotations

import logging

from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.records import ParseContext, SlurmVersion
from ccadapter.slurm.formats.text import version_from_text
from ccadapter.slurm.runner import CommandRunner

log = logging.getLogger(__name__)

COMMAND = "sacctmgr list clusters"


class ClusterList:
    def __init__(self, runner: CommandRunner) -> None:
        self.runner = runner
        self._version: SlurmVersion | None = None

    def names(self) -> list[str]:
        """Every cluster slurmdbd holds, in its order. Raises SlurmCommandError when sacctmgr
        fails, SlurmParseError when its answer cannot be read."""
        if self._version is None:
            self._version = version_from_text(self.runner.run(["sacctmgr", "-V"]),
                                              "sacctmgr -V")
        parser = format_for(self._version, COMMAND)
        out = self.runner.run(["sacctmgr", *parser.CLUSTER_LIST_ARGS])
        names, errors = parser.parse_cluster_list(out, ParseContext(str(self._version),
                                                                    COMMAND))
        for err in errors:
            log.error("skipped: %s", err)
        return names
