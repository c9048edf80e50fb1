"""What the Slurm commands a poller might run cost against a big queue (issue 11).

For each command: wall time, the client's CPU time and peak RSS (``wait4``), the bytes it
printed, and the CPU time slurmctld, slurmdbd and MariaDB spent meanwhile (from /proc, so run
it while nothing else is busy, or read those columns as an upper bound). The median of
``--runs`` runs. Standard library only; from the repository root::

    python3 -m tests.testbed.measure_commands --label "10,000 queued" --json out.json

Defaults fit clusterscale (``tests/testbed/slurm up scale``); ``--prefix`` and
``--ctld-pidfile`` point it at another cluster. ``--bed-cost SECONDS`` instead reports what
clusterscale itself costs: RSS of its slurmctld, slurmd, slurmstepd and job processes, and
their CPU share (and slurmdbd's and MariaDB's) over that many seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.testbed.load import SCALE_PREFIX

DAEMONS = {"slurmdbd": "/run/slurmdbd.pid", "mariadbd": "/run/mysqld/mysqld.pid"}
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Cost:
    command: str
    wall: float  # seconds
    cpu: float  # client user + system seconds
    max_rss_mb: float
    out_bytes: int
    slurmctld_cpu: float
    slurmdbd_cpu: float
    mariadbd_cpu: float
    rc: int


def daemon_cpu(pidfile: str) -> float:
    """User + system seconds of the process in ``pidfile`` (0 when it is not there)."""
    try:
        pid = Path(pidfile).read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def run_once(argv: Sequence[str], pidfiles: dict[str, str]) -> Cost:
    """Run once, reading all it prints: wall, the client's CPU and peak RSS (wait4), bytes,
    and the CPU the daemons in ``pidfiles`` (any of slurmctld, slurmdbd, mariadbd) spent."""
    before = {name: daemon_cpu(f) for name, f in pidfiles.items()}
    t0 = time.monotonic()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    size = 0
    while chunk := proc.stdout.read(1 << 20):
        size += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    wall = time.monotonic() - t0
    after = {name: daemon_cpu(f) for name, f in pidfiles.items()}
    d = {name: round(after[name] - before[name], 3) for name in pidfiles}
    return Cost(" ".join(argv), round(wall, 3), round(usage.ru_utime + usage.ru_stime, 3),
                round(usage.ru_maxrss / 1024, 1), size, d.get("slurmctld", 0.0),
                d.get("slurmdbd", 0.0), d.get("mariadbd", 0.0), proc.returncode)


def median_cost(argv: Sequence[str], runs: int, pidfiles: dict[str, str]) -> Cost:
    costs = [run_once(argv, pidfiles) for _ in range(runs)]
    mid = sorted(costs, key=lambda c: c.wall)[len(costs) // 2]
    for name in ("cpu", "max_rss_mb", "slurmctld_cpu", "slurmdbd_cpu", "mariadbd_cpu"):
        setattr(mid, name, round(statistics.median(getattr(c, name) for c in costs), 3))
    return mid


def commands(prefix: Sequence[str], one_id: str, ten_ids: str) -> list[tuple[str, list[str]]]:
    prefix = list(prefix)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 180))
    env = prefix if prefix[:1] == ["env"] else [*prefix, "env"]
    return [
        ("squeue -t all (text)", [*prefix, "squeue", "-h", "-t", "all", "-o", "%A %T %N"]),
        ("squeue --json", [*prefix, "squeue", "--json"]),
        ("scontrol show job -d (all)", [*prefix, "scontrol", "show", "job", "-d"]),
        ("scontrol show job -d ID", [*prefix, "scontrol", "show", "job", "-d", one_id]),
        ("sacct --json window 3 min", [*prefix, "sacct", "--json", "-X", "--allusers",
                                       "-S", since, "-E", "now"]),
        ("sacct -s R window 3 min (text)",
         [*env, "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P", "--allusers", "-s", "R",
          "-S", since, "-E", "now", "-o", "JobIDRaw,Start,End,State"]),
        ("sacct --json -j 10 ids", [*prefix, "sacct", "--json", "--allusers", "-j", ten_ids]),
    ]


def pick_ids(prefix: Sequence[str]) -> tuple[str, str]:
    """One job id and ten job ids of the cluster, running ones first."""
    ids: list[str] = []
    for state in ("R", "PD"):
        ids += subprocess.run([*prefix, "squeue", "-h", "-t", state, "-o", "%A"],
                              capture_output=True, text=True, check=True, timeout=300,
                              stdin=subprocess.DEVNULL).stdout.split()
    if not ids:
        raise SystemExit("no pending or running job to measure with")
    return ids[0], ",".join(ids[:10])


def render(label: str, costs: list[tuple[str, Cost]]) -> str:
    lines = [f"### {label}", "",
             "| command | wall s | CPU s | peak RSS MB | output bytes | slurmctld CPU s "
             "| slurmdbd CPU s | mariadbd CPU s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, c in costs:
        lines.append(f"| {name} | {c.wall:.2f} | {c.cpu:.2f} | {c.max_rss_mb:.0f} | "
                     f"{c.out_bytes:,} | {c.slurmctld_cpu:.2f} | {c.slurmdbd_cpu:.2f} | "
                     f"{c.mariadbd_cpu:.2f} |")
    return "\n".join(lines)


# clusterscale's daemons run with this working directory (its log directory), and so do the
# slurmstepd they start; the environment cannot tell (slurmstepd overwrites it with its title).
SCALE_CWD = Path(os.environ.get("TESTBED_DIR", "/var/lib/ccadapter-testbed"), "logs",
                 "clusterscale")
GROUP = {"slurmctld": "slurmctld", "slurmscriptd": "slurmscriptd (+ the hook runs)",
         "slurmd": "slurmd", "slurmstepd": "slurmstepd"}


def _stat(pid: str) -> tuple[str, int, float, float] | None:
    """comm, ppid, CPU seconds (its own and its reaped children's: slurmscriptd's include the
    PrologSlurmctld/EpilogSlurmctld runs) and RSS MB of a process (None when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    f = raw.rsplit(")", 1)[1].split()
    cpu = sum(int(x) for x in f[11:15]) / TICK  # utime, stime, cutime, cstime
    return comm, int(f[1]), cpu, int(f[21]) * 4096 / 2**20


def _scale_processes() -> dict[str, str]:
    """pid -> group of clusterscale's processes and of the shared daemons."""
    groups: dict[str, str] = {}
    stats = {pid: st for pid in os.listdir("/proc") if pid.isdigit() and (st := _stat(pid))}
    for name, f in DAEMONS.items():
        with contextlib.suppress(OSError):
            groups[Path(f).read_text().strip()] = name
    for pid, (comm, _, _, _) in stats.items():
        if comm.startswith("python"):  # the load generator; its CPU includes its sbatch runs
            with contextlib.suppress(OSError):
                if b"tests.testbed.load" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    groups[pid] = "load generator (+ sbatch)"
        if comm in GROUP:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cwd").readlink() == SCALE_CWD:
                    groups[pid] = GROUP[comm]
    for pid, (_, ppid, _, _) in stats.items():  # the jobs' own processes (sleep)
        if pid not in groups and groups.get(str(ppid)) == "slurmstepd":
            groups[pid] = "job processes"
    return groups


def _pss_mb(pid: str) -> float:
    """Proportional set size: shared pages (the same binary in 500 slurmstepd) counted once."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _machine_cpu() -> float:
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return (sum(map(int, f)) - int(f[3]) - int(f[4])) / TICK  # all but idle and iowait


def bed_cost(seconds: float, interval: float = 1.0) -> str:
    """clusterscale's processes by group over ``seconds``, sampled every ``interval``:
    mean count, RSS and PSS, and CPU share. Jobs come and go: a process first seen after the
    start counts from zero, one that ends counts up to its last sample."""
    m0, t0 = _machine_cpu(), time.monotonic()
    base: dict[str, float] = {}
    last: dict[str, tuple[str, float]] = {}  # pid -> (group, CPU seconds)
    sums: dict[str, list[float]] = {}  # group -> [count, RSS, PSS] summed over samples
    samples = 0
    while True:
        for pid, group in _scale_processes().items():
            st = _stat(pid)
            if st is None:
                continue
            if pid not in base:
                base[pid] = st[2] if samples == 0 else 0.0
            last[pid] = (group, st[2])
            row = sums.setdefault(group, [0.0, 0.0, 0.0])
            row[0] += 1
            row[1] += st[3]
            row[2] += _pss_mb(pid)
        samples += 1
        if time.monotonic() - t0 >= seconds:
            break
        time.sleep(interval)
    el, machine = time.monotonic() - t0, _machine_cpu() - m0
    cpu: dict[str, float] = {}
    for pid, (group, sec) in last.items():
        cpu[group] = cpu.get(group, 0.0) + sec - base[pid]
    lines = [f"### test bed cost over {el:.0f} s, {samples} samples (machine: "
             f"{100 * machine / el:.0f} % of one core in all, {os.cpu_count()} cores)", "",
             "| processes | mean count | RSS MB (sum) | PSS MB (sum) | CPU % of one core |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for group, (n, rss, pss) in sorted(sums.items()):
        lines.append(f"| {group} | {n / samples:.0f} | {rss / samples:.0f} | "
                     f"{pss / samples:.0f} | {100 * cpu[group] / el:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.testbed.measure_commands",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", type=json.loads, default=list(SCALE_PREFIX),
                   help="client prefix as a JSON list (default: clusterscale's)")
    p.add_argument("--ctld-pidfile", default="/run/slurmctld-scale.pid")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--label", default="", help="heading of the table (e.g. the queue size)")
    p.add_argument("--json", type=Path, help="append the figures to this JSON-lines file")
    p.add_argument("--bed-cost", type=float, metavar="SECONDS",
                   help="report clusterscale's own cost over SECONDS instead")
    a = p.parse_args(argv)
    if a.bed_cost:
        print(bed_cost(a.bed_cost))
        return 0
    pidfiles = {"slurmctld": a.ctld_pidfile, **DAEMONS}
    one_id, ten_ids = pick_ids(a.prefix)
    costs = [(name, median_cost(cmd, a.runs, pidfiles))
             for name, cmd in commands(a.prefix, one_id, ten_ids)]
    print(render(a.label or "commands", costs))
    if a.json:
        with a.json.open("a", encoding="utf-8") as fh:
            for name, c in costs:
                fh.write(json.dumps({"label": a.label, "name": name, **asdict(c)}) + "\n")
    return 0 if all(c.rc == 0 for _, c in costs) else 1


if __name__ == "__main__":
    sys.exit(main())
