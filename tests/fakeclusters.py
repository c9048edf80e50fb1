"""Several clusters of one slurmdbd for unit tests, each answering from its recordings.

A command goes to the cluster its ``--clusters NAME`` names (the ``local`` one without it),
as the real clients route it: sacct through slurmdbd, scontrol to that cluster's slurmctld.
A name slurmdbd does not hold is answered the way 22.05 answers it on the test bed: sacct
prints nothing and exits 0, scontrol fails ("No cluster 'x' known by database"). ``sacctmgr``
answers the cluster list in 24.11's recorded JSON form, with the names in ``listed``.

Switches per cluster: ``down`` (every command fails, as when its slurmctld and the route to
it are gone) and ``hang`` (every command waits for the event, as a command running into
slurmCommandTimeout).
"""

from __future__ import annotations

import copy
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

from ccadapter.errors import SlurmCommandError, TransientSlurmError
from ccadapter.slurm.runner import Completed
from tests.conftest import fixture_text
from tests.fakeslurm import RecordedSlurm


class SharedDbd:
    def __init__(self, clusters: Mapping[str, RecordedSlurm], local: str | None = None) -> None:
        self.clusters = dict(clusters)
        self.local = local or next(iter(self.clusters))
        self.listed: list[str] = list(self.clusters)
        self.down: set[str] = set()
        self.hang: dict[str, threading.Event] = {}
        self.calls: Counter[str] = Counter()
        self.argvs: list[list[str]] = []
        self._lock = threading.Lock()

    def by_cluster(self) -> dict[str | None, list[list[str]]]:
        """The commands each cluster was asked (None: sacctmgr, which asks slurmdbd)."""
        out: dict[str | None, list[list[str]]] = {}
        for argv in self.argvs:
            name = None if argv[0] == "sacctmgr" else _split(argv)[0] or self.local
            out.setdefault(name, []).append(argv)
        return out

    # --- the CommandRunner protocol ---------------------------------------------------------

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        argv = self._count(argv)
        if argv[0] == "sacctmgr":
            return self._sacctmgr(argv)
        name, rest = self._route(argv)
        if name not in self.clusters:
            if rest[0] == "sacct":
                return ""
            raise SlurmCommandError(argv, "exit code 1", _UNKNOWN.format(name=name))
        return self.clusters[name].run(rest, retry=retry, timeout=timeout, env=env)

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None, env: Mapping[str, str] | None = None
                  ) -> Completed:
        argv = self._count(argv)
        name, rest = self._route(argv)
        if name not in self.clusters:
            return Completed("", _UNKNOWN.format(name=name), 1)
        return self.clusters[name].unchecked(rest, stdin=stdin, timeout=timeout, env=env)

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed:
        """As a long-lived scontrol answers: like :meth:`unchecked`."""
        return self.unchecked(argv, stdin=stdin, timeout=timeout, env=env)

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]:
        argv = self._count(argv)
        name, rest = self._route(argv)
        return self.clusters[name].lines(rest, timeout=timeout, env=env)

    # --- answers ------------------------------------------------------------------------------

    def _count(self, argv: Sequence[str]) -> list[str]:
        argv = list(argv)
        with self._lock:
            self.calls[argv[0]] += 1
            self.argvs.append(argv)
        return argv

    def _route(self, argv: list[str]) -> tuple[str, list[str]]:
        name, rest = _split(argv)
        name = name or self.local
        if name in self.hang:
            self.hang[name].wait(10)
        if name in self.down:
            raise TransientSlurmError(argv, "exit code 1", f"{argv[0]}: error: '{name}' "
                                      "can't be reached now, or it is an invalid entry for "
                                      "--cluster.")
        return name, rest

    def _sacctmgr(self, argv: list[str]) -> str:
        if argv[1:] == ["-V"]:
            return "slurm 24.11.5\n"
        assert argv[1:] == ["list", "clusters", "--json"], argv
        doc = json.loads(fixture_text("24.11", "sacctmgr-clusters.json"))
        entry = doc["clusters"][0]
        doc["clusters"] = [{**copy.deepcopy(entry), "name": name} for name in self.listed]
        return json.dumps(doc)


_UNKNOWN = ("scontrol: error: No cluster '{name}' known by database.\n"
            "scontrol: error: '{name}' can't be reached now, or it is an invalid entry for "
            "--cluster.  Use 'sacctmgr list clusters' to see available clusters.\n")


def _split(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--clusters NAME`` taken out of ``argv``: (NAME or None, the rest)."""
    if "--clusters" not in argv:
        return None, argv
    at = argv.index("--clusters")
    return argv[at + 1], argv[:at] + argv[at + 2:]
