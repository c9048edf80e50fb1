"""Record ``scontrol ping`` as each Slurm version prints it, into tests/fixtures/<version>/.

Run as root with the test bed up (the failover profile too: ``tests/testbed/slurm up
failover``):  .venv/bin/python -m tests.testbed.record_ping [--versions 23.02,...] [SCENARIO]

  scontrol-ping-single.txt       each standard cluster: one SlurmctldHost (every version)
  scontrol-ping-backup-down.txt  every version but 22.05: its own cluster read with a copy of
                                 its slurm.conf naming a second SlurmctldHost where none
                                 answers (the two-controller layout of that version's output)
  22.05 on clusterha (the failover profile), in the state the cluster is in when called:
  scontrol-ping-SCENARIO.txt     e.g. "primary" (both up, the primary in control),
                                 "takeover" (after `scontrol takeover`: primary down),
                                 "both-down" (the moment between)

The daemon parses these with :func:`ccadapter.slurm.formats.ping.parse_ping`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.workload import TESTBED, Cluster, testbed_clusters

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GHOST = "SlurmctldHost=ha-ghost(10.217.45.6)"  # an address no slurmctld answers on


def ping(prefix: tuple[str, ...] | list[str]) -> str:
    proc = subprocess.run([*prefix, "scontrol", "ping"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)
    return proc.stdout


def record_standard(cluster: Cluster) -> list[Path]:
    out = FIXTURES / cluster.short
    paths = [out / "scontrol-ping-single.txt"]
    paths[0].write_text(ping(cluster.prefix))
    if cluster.short == "22.05":  # its two-controller layout is clusterha's (record_failover)
        return paths
    # its own slurm.conf beside it (gres.conf, cgroup.conf are read from there), with a
    # second SlurmctldHost where none answers
    conf = Path(cluster.slurm_conf)
    lines = conf.read_text().splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith("SlurmctldHost="))
    copy = conf.with_name("ccadapter-ping-two-controllers.conf")
    copy.write_text("\n".join([*lines[:at + 1], GHOST, *lines[at + 1:]]) + "\n")
    root = Path(cluster.prefix[1]) if cluster.prefix[:1] == ("chroot",) else Path("/")
    try:
        text = ping([*cluster.prefix, "env", f"SLURM_CONF=/{copy.relative_to(root)}"])
    finally:
        copy.unlink()
    paths.append(out / "scontrol-ping-backup-down.txt")
    paths[-1].write_text(text)
    return paths


def record_failover(scenario: str) -> Path:
    info = json.loads(subprocess.run([str(TESTBED), "info", "failover"], capture_output=True,
                                     text=True, timeout=60, check=True).stdout)
    if not info:
        raise SystemExit("clusterha is not up: tests/testbed/slurm up failover")
    path = FIXTURES / "22.05" / f"scontrol-ping-{scenario}.txt"
    path.write_text(ping(info[0]["prefix"]))
    return path


def main() -> None:
    args = sys.argv[1:]
    wanted = None
    if args[:1] == ["--versions"]:
        wanted, args = set(args[1].split(",")), args[2:]
    if args:
        print(f"recorded {record_failover(args[0])}")
        return
    for cluster in testbed_clusters():
        if wanted is not None and cluster.short not in wanted:
            continue
        for path in record_standard(cluster):
            print(f"recorded {path}")


if __name__ == "__main__":
    main()
