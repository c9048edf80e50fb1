"""The demo's site (tests/testbed/demo): the real cc-backend 1.5.4 with its web interface and
its metric store, ClusterCockpit's cc-metric-collector on each of cluster22's nodes feeding
that store, ccadapter's daemon fed by the Prolog/Epilog hook of the test bed's cluster22, and
a few jobs, shown as cc-backend holds them (the OS ids of each run's hwthreads included): a
job's page plots its node's load, memory and its own hwthreads' user time. Everything stays
running until ``tests/testbed/demo down``, so a newcomer can submit jobs of their own and
watch them arrive in the web interface.

Runs in the checkout's .venv without pytest (the demo installs ccadapter alone). Everything
lives in ``$TESTBED_DIR/demo``, made anew at each ``up``; ``demo.json`` there says what the
demo submitted and where cc-backend listens (the browser test reads it). cc-backend commits
its job cache every :data:`COMMIT` (2 minutes by default): its job list shows a started job
only after a commit, or its stop.

    python -m tests.testbed.demo_site up|down
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.bench.scale_probe import read_stamps
from tests.ccbackend_site import Nodes, token_in, write_archive, write_env
from tests.testbed import collector_site

REPO = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("TESTBED_DIR", "/var/lib/ccadapter-testbed")) / "demo"
CLUSTER = "cluster22"
PORT = 18480  # below the ephemeral range: no client connection draws it
COMMIT = "10s"
USER = "ccuser"  # a Slurm user of the test bed (account testacct): the jobs are not root's
LOGIN = "demo"
# name, sbatch arguments, the state each of its runs ends the demo in
JOBS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("demo-gpu", ("-p", "gpu", "--gres=gpu:tesla:1", "-t", "60", "--wrap", "sleep 3500"),
     "running"),  # an hour, or until `down`
    ("demo-array", ("--array=1-3", "-t", "5", "--wrap", "sleep 4"), "completed"),
    ("demo-two-nodes", ("-N2", "-n4", "-t", "5", "--wrap", "sleep 6"), "completed"),
    ("demo-fails", ("-t", "5", "--wrap", "sleep 2; exit 3"), "failed"),
    # one core of an SMT node: Slurm's CPUs 2k, 2k+1 are the Linux ids k and k + 8 there
    ("demo-smt-core", ("-p", "topo", "-c", "2", "-t", "5", "--wrap", "sleep 5"), "completed"),
)


@dataclass
class Run:
    """One Slurm run as the demo saw it: Slurm's side, then cc-backend's."""

    job_id: int
    label: str  # Slurm's name of it: 123 or 123_2
    name: str
    expect: str
    nodes: str = ""
    state: str = ""  # as cc-backend holds it
    os_ids: str = ""  # the hwthreads (and GPUs) cc-backend holds it with: "n1:0-1 n2:3"
    db_id: int = 0  # cc-backend's id: its job page is /monitoring/job/<db_id>
    held_s: float | None = None  # from its PrologSlurmctld to cc-backend holding it
    listed_s: float | None = None  # ... to cc-backend's job list showing it


def say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], **kw: Any) -> str:
    out = subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, **kw)
    if out.returncode != 0:
        sys.exit(f"{Path(cmd[0]).name} {cmd[1] if len(cmd) > 1 else ''} failed "
                 f"(exit {out.returncode}): {(out.stdout + out.stderr).strip()[-1500:]}")
    return out.stdout


def cluster_info() -> dict[str, Any]:
    doc = json.loads(run([str(REPO / "tests/testbed/slurm"), "info"]))
    info = next((c for c in doc if c["cluster"] == CLUSTER), None)
    if info is None:
        sys.exit(f"the test bed's {CLUSTER} is not up: tests/testbed/slurm up 22")
    return info


def private(path: Path, text: str) -> None:
    """``text`` in a file only root reads, from its first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def alive(pid_file: Path, marker: Path) -> int:
    """The pid in ``pid_file`` if that process is the demo's own: its command line names
    ``marker`` (the daemon's config file, cc-backend's site directory as its working
    directory), not a reused pid nor a test's server."""
    try:
        pid = int(pid_file.read_text().split()[0])
        proc = Path(f"/proc/{pid}")
        args = proc.joinpath("cmdline").read_bytes().split(b"\0")
        cwd = proc.joinpath("cwd").resolve()
    except (OSError, ValueError, IndexError):
        return 0
    return pid if str(marker).encode() in args or cwd == marker.resolve() else 0


DAEMON = (HOME / "ccadapter" / "daemon.pid", HOME / "ccadapter" / "config.json")
SERVER = (HOME / "cc-backend.pid", HOME / "cc-backend")
COLLECTORS = HOME / "collector"  # a directory per node: its config, log and pid


def collector_of(node_dir: Path) -> tuple[Path, Path]:
    """(pid file, marker) of the collector of one node (its config names the node's directory)."""
    return node_dir / "collector.pid", node_dir / "config.json"


def stop(pid_file: Path, marker: Path, what: str) -> None:
    pid = alive(pid_file, marker)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(300):
            if not alive(pid_file, marker):
                say(f"stopped {what} (pid {pid})")
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            say(f"killed {what} (pid {pid}): it did not stop within 30 s of SIGTERM")
    pid_file.unlink(missing_ok=True)


SUBMITTED = HOME / "submitted"  # the demo's job ids, one a line, until `down` cancels them


def down() -> None:
    """The daemon first (it would report cc-backend missing), then cc-backend, then the
    jobs the demo submitted, by id (none of a user's own), if it submitted any since."""
    stop(*DAEMON, "ccadapter daemon")
    for node_dir in sorted(COLLECTORS.glob("*/")):
        stop(*collector_of(node_dir), f"cc-metric-collector of {node_dir.name}")
    stop(*SERVER, "cc-backend")
    try:
        ids = SUBMITTED.read_text().split()
    except FileNotFoundError:
        return
    try:
        subprocess.run(["scancel", *ids], check=False, capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"the demo's jobs {' '.join(ids)} not cancelled ({exc}): is cluster22 up?")
        return
    SUBMITTED.unlink()


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (connections of the past, in TIME_WAIT,
    do not count: a server sets SO_REUSEADDR too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_ccbackend(info: dict[str, Any]) -> tuple[str, str, str]:
    """A cc-backend site in HOME/cc-backend, set up as its documentation says, started
    detached; its job pages plot what the collectors send. Returns the login's password,
    the daemon's JWT and the collectors' (each of the ``api`` role, a user of its own)."""
    binary = run([str(REPO / "tests/testbed/ccbackend"), "path"]).strip()
    site = HOME / "cc-backend"
    nodes = Nodes(tuple(info["nodes"]), (info["gpu_node"],), smt=tuple(info["smt_nodes"]))
    write_archive(site / "var" / "job-archive", {CLUSTER: nodes})
    plotted = list(collector_site.METRICS)
    write_env(site)
    (site / "config.json").write_text(json.dumps({
        "main": {"addr": f"127.0.0.1:{PORT}", "db": "./var/job.db",
                 "api-allowed-ips": ["127.0.0.1"]},
        "auth": {"jwts": {"max-age": "2000h"}},
        "cron": {"commit-job-worker": COMMIT},
        "archive": {"kind": "file", "path": "./var/job-archive"},
        "metric-store": {"retention-in-memory": "2h", "memory-cap": 1},
        "ui": {"metric-config": {"job-list-metrics": plotted, "job-view-plot-metrics": plotted,
                                 "job-view-table-metrics": plotted}}}, indent=1))
    password = secrets.token_urlsafe(9)
    run([binary, "-migrate-db"], cwd=site)
    run([binary, "-add-user", f"{LOGIN}:admin:{password}"], cwd=site)
    out = run([binary, "-add-user", f"ccadapter:api:{secrets.token_urlsafe(12)}",
               "-jwt", "ccadapter"], cwd=site)
    token = token_in(out, "ccadapter")
    out = run([binary, "-add-user", f"collector:api:{secrets.token_urlsafe(12)}",
               "-jwt", "collector"], cwd=site)
    collector_token = token_in(out, "collector")
    if not port_free(PORT):
        sys.exit(f"127.0.0.1:{PORT} is taken by another program (ss -ltnp sport = {PORT}): "
                 f"the demo's cc-backend listens there")
    with (site / "server.log").open("a") as log:
        proc = subprocess.Popen([binary, "-server"], cwd=site, stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    (HOME / "cc-backend.pid").write_text(f"{proc.pid}\n")
    until = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/login", timeout=5).close()
            if proc.poll() is None:
                return password, token, collector_token
        except OSError:
            pass
        if proc.poll() is not None or time.time() > until:
            sys.exit(f"cc-backend did not start: see {site / 'server.log'}")
        time.sleep(0.2)


def start_daemon(info: dict[str, Any], token: str) -> None:
    """``ccadapter daemon`` with a cc-slurm-adapter config file, the token in a file of its
    own, listening where the cluster's hook wrapper sends; started detached."""
    state = HOME / "ccadapter"
    state.mkdir()
    jwt = state / "jwt"
    private(jwt, token + "\n")
    config = state / "config.json"
    config.write_text(json.dumps({
        "pidFilePath": str(state / "daemon.pid"),
        "prepSockListenPath": info["hook_socket"], "prepSockConnectPath": info["hook_socket"],
        "lastRunPath": str(state / "lastrun"), "slurmPollInterval": 10, "slurmQueryDelay": 1,
        "ccPollInterval": 60, "ccRestUrl": f"http://127.0.0.1:{PORT}",
        "ccRestJwtFile": str(jwt), "ccRestSubmitJobs": True}, indent=2))
    exe = Path(sys.executable).parent / "ccadapter"
    with (state / "daemon.log").open("a") as log:
        proc = subprocess.Popen([str(exe), "daemon", "--config", str(config)], stdout=log,
                                stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    until = time.time() + 60
    while not alive(*DAEMON):
        if proc.poll() is not None or time.time() > until:
            sys.exit(f"ccadapter daemon did not start: see {state / 'daemon.log'}")
        time.sleep(0.2)


def start_collectors(info: dict[str, Any], token: str) -> None:
    """A cc-metric-collector for each of the cluster's nodes, started detached, sending to
    the demo's cc-backend (tests/testbed/collector_site.py); waits for each to have sent."""
    binary = run([str(REPO / "tests/testbed/ccbackend"), "collector-path"]).strip()
    procs = {}
    for node in info["nodes"]:
        node_dir = COLLECTORS / node
        config = collector_site.write_config(node_dir, node, f"http://127.0.0.1:{PORT}",
                                             CLUSTER, token)
        procs[node] = collector_site.start(binary, config)
        collector_of(node_dir)[0].write_text(f"{procs[node].pid}\n")
    time.sleep(2)  # a wrong config ends it at once
    dead = [n for n, p in procs.items() if p.poll() is not None]
    if dead:
        sys.exit(f"cc-metric-collector of {', '.join(dead)} ended: see "
                 f"{COLLECTORS / dead[0] / 'collector.log'}")


def submit() -> list[tuple[str, int, str]]:
    """(name, Slurm job id, state its runs end the demo in) of each job submitted."""
    out = []
    for name, args, expect in JOBS:
        job = run(["runuser", "-u", USER, "--", "sbatch", "--parsable", "-J", name,
                   "-o", "/dev/null", "-D", "/tmp", *args]).strip().split(";")[0]
        out.append((name, int(job), expect))
        with SUBMITTED.open("a") as ids:
            ids.write(f"{job}\n")
    return out


def slurm_runs(jobs: Sequence[tuple[str, int, str]]) -> list[Run]:
    """The runs Slurm has of the demo's jobs (an array's tasks once they exist)."""
    names = {job: (name, expect) for name, job, expect in jobs}
    ids = ",".join(str(j) for j in names)
    out = run(["sacct", "-X", "-n", "-P", "-j", ids, "-o", "JobIDRaw,JobID,NodeList"])
    runs = []
    for line in out.splitlines():
        raw, label, nodes = line.split("|")
        base = int(label.split("_")[0]) if label.split("_")[0].isdigit() else int(raw)
        if base in names and "[" not in label:
            runs.append(Run(int(raw), label, *names[base], nodes=nodes))
    return runs


def os_ids(resources: str) -> str:
    """cc-backend's resources of a job, short: each host's hwthreads as ranges, then its
    accelerators (``n1:0-1,4 gpu:0``)."""
    out = []
    for res in json.loads(resources or "[]"):
        ids = sorted(res.get("hwthreads") or ())
        spans: list[str] = []
        for i in ids:
            if spans and i == int(spans[-1].split("-")[-1]) + 1:
                spans[-1] = f"{spans[-1].split('-')[0]}-{i}"
            else:
                spans.append(str(i))
        gpus = " ".join(f"gpu:{a}" for a in res.get("accelerators") or ())
        out.append(f"{res['hostname']}:{','.join(spans) or '-'}" + (f" {gpus}" if gpus else ""))
    return " ".join(out)


def held(min_job: int) -> dict[int, tuple[str, int, str]]:
    """job id -> (state, cc-backend id, :func:`os_ids` of its resources) of what cc-backend
    holds, committed or in its job cache (which no API lists), read from its database beside
    the running server."""
    path = HOME / "cc-backend" / "var" / "job.db"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        out = {}
        for table in ("job_cache", "job"):
            for job_id, state, db_id, resources in db.execute(
                    f"SELECT job_id, job_state, id, resources FROM {table} "
                    "WHERE cluster = ? AND job_id >= ?", (CLUSTER, min_job)):
                out[job_id] = (state, db_id if table == "job" else 0, os_ids(resources))
        return out
    finally:
        db.close()


def watch(jobs: Sequence[tuple[str, int, str]], stamps_file: Path,
          timeout: float = 150) -> list[Run]:
    """Until cc-backend holds and lists every run in the state it ends the demo in
    (``stamps_file``: where the hook wrapper notes each Prolog's moment)."""
    first = min(j for _, j, _ in jobs)
    runs: dict[int, Run] = {}
    # cc-backend's side, by job id, from the first read that shows it: slurmdbd may name an
    # array's tasks a few seconds after cc-backend got them
    got: dict[int, float] = {}
    listed: dict[int, tuple[float, int]] = {}
    until, asked = time.time() + timeout, 0.0
    while True:
        holds = held(first)
        now = time.time()  # after the read: a figure is late by at most one round (0.1 s)
        for job_id, (_, db_id, _) in holds.items():
            got.setdefault(job_id, now)
            if db_id:
                listed.setdefault(job_id, (now, db_id))
        if now - asked >= 1:  # Slurm's accounting, once a second
            asked = now
            for r in slurm_runs(jobs):
                seen = runs.setdefault(r.job_id, r)
                seen.label, seen.nodes = r.label, r.nodes  # an array task named once it runs
        stamps = read_stamps(stamps_file)
        for job_id, r in runs.items():
            stamp = stamps.get(job_id)
            if job_id not in holds or stamp is None:
                continue
            r.state, r.held_s, r.os_ids = holds[job_id][0], got[job_id] - stamp, holds[job_id][2]
            if job_id in listed:
                r.listed_s, r.db_id = listed[job_id][0] - stamp, listed[job_id][1]
        expected = sum(3 if "--array=1-3" in args else 1 for _, args, _ in JOBS)
        if len(runs) == expected and all(r.state == r.expect and r.db_id for r in runs.values()):
            return sorted(runs.values(), key=lambda r: [int(p) for p in r.label.split("_")])
        if now > until:
            late = [f"{r.label} {r.state or 'absent'}" for r in runs.values() if r.state != r.expect
                    or not r.db_id]
            sys.exit(f"after {timeout:.0f} s cc-backend does not hold every demo run as "
                     f"expected: {', '.join(late) or 'runs missing in Slurm'}; see "
                     f"{HOME / 'ccadapter' / 'daemon.log'}")
        time.sleep(0.1)


def report(runs: Sequence[Run], password: str) -> None:
    secs = lambda v: "-" if v is None else f"{v:.2f} s"  # noqa: E731
    print(f"\ncc-backend 1.5.4 holds the demo's jobs (cluster {CLUSTER}). From the moment "
          f"slurmctld ran the job's\nPrologSlurmctld: held, in cc-backend's database (read "
          f"every 0.1 s); listed, in its job list, which\nshows a started job at its next "
          f"job-cache commit (every {COMMIT} here, 2 min by default) or at its stop.\n")
    print(f"  {'job':<9} {'name':<15} {'state':<10} {'nodes':<8} {'held after Prolog':>18} "
          f"{'listed after Prolog':>20}  OS ids (hwthreads, GPUs)")
    for r in runs:
        print(f"  {r.label:<9} {r.name:<15} {r.state:<10} {r.nodes:<8} {secs(r.held_s):>18} "
              f"{secs(r.listed_s):>20}  {r.os_ids}")
    url = f"http://127.0.0.1:{PORT}"
    gpu = next(r for r in runs if r.expect == "running")
    print(f"""
Web interface: {url}/monitoring/jobs/?cluster={CLUSTER}
  login: {LOGIN} / {password}   (running job: {url}/monitoring/job/{gpu.db_id})
  a job's page plots its nodes' cpu_load and mem_used and its own hwthreads' cpu_user, sent
  every {collector_site.INTERVAL_S} s by cc-metric-collector on each node (the samples are
  this host's: the nodes share it)
  from another machine: ssh -L {PORT}:127.0.0.1:{PORT} root@{os.uname().nodename}, then the same URL
Submit your own (cluster {CLUSTER} is the host's Slurm; no environment needed), e.g.:
  runuser -u {USER} -- sbatch -N1 -D /tmp -o /dev/null --wrap 'sleep 60'
Logs: {HOME / 'ccadapter' / 'daemon.log'}, {HOME / 'cc-backend' / 'server.log'},
  {COLLECTORS / '<node>' / 'collector.log'}
Stop everything: tests/testbed/demo down
""")


def up() -> None:
    info = cluster_info()
    down()
    if HOME.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(HOME / "cc-backend"),
                        str(HOME / "ccadapter"), str(COLLECTORS)], check=True)
    HOME.mkdir(parents=True, exist_ok=True)
    password, token, collector_token = start_ccbackend(info)
    say(f"cc-backend 1.5.4 with its web interface on http://127.0.0.1:{PORT}")
    start_collectors(info, collector_token)
    say(f"cc-metric-collector on {', '.join(info['nodes'])}, into cc-backend's metric store")
    start_daemon(info, token)
    say(f"ccadapter daemon running, its hook socket {info['hook_socket']}")
    jobs = submit()
    say("submitted " + ", ".join(f"{name} ({job})" for name, job, _ in jobs)
        + f" as {USER}; waiting until cc-backend holds and lists them")
    runs = watch(jobs, Path(info["hook_stamps"]))
    private(HOME / "demo.json", json.dumps({
        "url": f"http://127.0.0.1:{PORT}", "cluster": CLUSTER, "login": LOGIN,
        "hook_socket": info["hook_socket"],
        "password": password, "jobs": [{"name": n, "job_id": j} for n, j, _ in jobs],
        "runs": [asdict(r) for r in runs]}, indent=1))
    report(runs, password)


def main(argv: Sequence[str]) -> None:
    if list(argv) == ["up"]:
        up()
    elif list(argv) == ["down"]:
        down()
    else:
        sys.exit("usage: python -m tests.testbed.demo_site up|down")


if __name__ == "__main__":
    main(sys.argv[1:])
