"""What a Slurm installation is, as :class:`~ccadapter.slurm.collector.Collector` reads it
beside its jobs: its release, its cluster's name and config, its controllers and its nodes.
Each is one command, read when asked; the release and the name are kept once known, for
the error messages of every answer read later."""

from __future__ import annotations

import logging

from ccadapter.errors import SlurmCommandError, SlurmParseError
from ccadapter.slurm.controller import clusters_arg
from ccadapter.slurm.formats.ping import ControllerPing, parse_ping
from ccadapter.slurm.formats.records import NodeState, ParseContext, SlurmVersion
from ccadapter.slurm.formats.text import (
    parse_cluster_name,
    parse_energy_plugin,
    parse_nodes,
    version_from_text,
)
from ccadapter.slurm.runner import CommandRunner

log = logging.getLogger(__name__)


class SlurmInstallation:
    """The facts of one Slurm installation, asked through a :class:`CommandRunner`; the
    base of :class:`~ccadapter.slurm.collector.Collector`, which shares its caches."""

    def __init__(self, runner: CommandRunner, cluster: str | None = None,
                 config_text: str = "") -> None:
        self.runner = runner
        self._known_version: str | None = None  # for error messages only
        self.cluster = cluster
        self._cluster: str | None = cluster  # the name jobs carry, once known
        self._config_text = config_text  # `scontrol show config`, once read

    def nodes(self, cluster: str | None = None) -> list[NodeState]:
        """Node states (``scontrol -o show node``: one call, one line per node)."""
        out = self.runner.run(["scontrol", *clusters_arg(cluster or self.cluster), "-o", "show",
                               "node"])
        nodes, errors = parse_nodes(out, ParseContext(self._known_version or "unknown",
                                                      "scontrol -o show node"))
        for err in errors:
            log.error("skipped: %s", err)
        return nodes

    # --- the installation -----------------------------------------------------------------

    def controllers(self) -> list[ControllerPing]:
        """The SlurmctldHosts in slurm.conf order and which of them answer (``scontrol
        ping``, which exits 1 when none does: its answer is read whatever the status)."""
        argv = ["scontrol", "ping"]
        done = self.runner.unchecked(argv)
        try:
            return parse_ping(done.stdout, self._known_version or "unknown")
        except SlurmParseError:
            if done.returncode:
                raise SlurmCommandError(argv, f"exit status {done.returncode}",
                                        done.stderr) from None
            raise

    def cluster_name(self) -> str:
        """The local cluster's name, as jobs carry it."""
        out = self._config_text = self.runner.run(["scontrol", "show", "config"])
        name = parse_cluster_name(out)
        if not name:
            raise SlurmParseError(self._version_text(), "scontrol show config",
                                  "no ClusterName line")
        return name

    @property
    def config_text(self) -> str:
        """``scontrol show config`` as :meth:`cluster_name` read it ("" before)."""
        return self._config_text

    def energy_accounted(self) -> bool:
        """Whether slurmctld gathers energy (``AcctGatherEnergyType`` is a plugin other than
        none), from the config :meth:`cluster_name` read (else asked now, of this
        collector's cluster)."""
        out = self._config_text or self.runner.run(["scontrol", *clusters_arg(self.cluster), "show",
                                                    "config"])
        return parse_energy_plugin(out) is not None

    def cluster_name_cached(self) -> str:
        if self._cluster is None:
            self._cluster = self.cluster_name()
        return self._cluster

    def version(self) -> SlurmVersion:
        out = self.runner.run(["sacct", "-V"])
        return version_from_text(out, "sacct -V")

    def _version_text(self) -> str:
        if self._known_version:
            return self._known_version
        try:
            self._known_version = str(self.version())
        except (SlurmCommandError, SlurmParseError):
            return "unknown"
        return self._known_version
