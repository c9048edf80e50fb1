"""What ccadapter costs the controller host beside cc-slurm-adapter (issue 47's footprint):
the hook per job, and the daemon at rest.

1. ``hook``: CPU (the child's own rusage, from wait4) and wall time of one hook call, the
   variants run alternately so that the machine's noise falls on each alike: the shipped
   hooks/ccadapter-hook.sh to a TCP socket (bash alone), the same script to a UNIX socket
   (bash, then the Python hook), the Python hook run as the test bed does, and the floors: a
   bare ``python3 -I -S -c pass`` and a bare ``bash -p -c :``. They send to the daemon's own
   server (ccadapter.prep.server.PrepServer), which answers "ok" as the daemon does.
2. ``prolog``: what slurmctld waits for, read in its own log: from "sched: Allocate JobId=N"
   to "prolog_running_decr: Configuration for JobId=N is complete", for jobs started while
   cluster2505's PrologSlurmctld is (a) the Python hook alone, (b) the shipped script to
   TCP; the daemon listening is the real ccadapter into a real cc-backend.
3. ``daemon``: ccadapter and cc-slurm-adapter at 0 queued on the same cluster, one after the
   other, each into its own real cc-backend, polling every 10 s: CPU until ready (ccadapter:
   "listening for Prolog/Epilog"; cc-slurm-adapter: 5 s after its start), CPU over an idle
   ``idle`` seconds, RSS and PSS (smaps_rollup) at its end. Beside them, the floor of the
   chosen libraries: an interpreter that imports only the daemon's third-party modules, and
   a bare one; ``python -X importtime`` of ``ccadapter.daemon.app``, by top-level package.

Needs the test bed up with the hook, and cc-slurm-adapter built. Run:
flock /tmp/ccadapter-integration.lock .venv/bin/python -m tests.bench.footprint
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ccadapter.prep.server import PrepServer
from ccadapter.runtime.lastrun import LastRun
from tests.bench import results
from tests.bench.delivery import cpu_seconds
from tests.ccbackend import CcBackend
from tests.integration.workload import Cluster, testbed_clusters
from tests.predecessor import site_config, start_ccadapter, start_predecessor
from tests.unit.prep.test_hook_and_server import free_port, python_venv, site_hook

REPO = Path(__file__).resolve().parents[2]
LOGS = Path(os.environ.get("TESTBED_DIR", "/var/lib/ccadapter-testbed")) / "logs"
HOOK_CMD = "import sys; sys.path.insert(0, {!r}); import hook; sys.exit(hook.main())"
# what the daemon imports from outside the standard library, for the floor
LIBRARIES = ("requests", "pydantic", "prometheus_client", "tenacity", "filelock", "click",
             "hostlist")
ENV = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_ID": "424242",
       "SLURM_CLUSTER_NAME": "bench", "SLURM_JOB_USER": "u", "SLURM_JOB_NAME": "bench"}
ALLOCATE = re.compile(r"^\[(\S+)\] sched: Allocate JobId=(\d+) ")
CONFIGURED = re.compile(r"^\[(\S+)\] prolog_running_decr: Configuration for JobId=(\d+) ")


@dataclass
class Call:
    """Medians over ``runs`` calls: the child's CPU (user + system) and wall, in ms."""
    name: str
    runs: int
    cpu_ms: float
    wall_ms: float


def spawn_cost(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv[0]} exited {status}")
    return (usage.ru_utime + usage.ru_stime) * 1000, wall * 1000


def script(tmp: Path, spec: str) -> Path:
    """The shipped script as a site installs it, its config naming ``spec``."""
    venv = python_venv(tmp, "/usr/bin/python3")
    name = "tcp" if spec.startswith("tcp:") else "unix"
    cfg = tmp / f"config-{name}.json"
    cfg.write_text(json.dumps({"prepSockConnectPath": spec}, indent=2))
    out = tmp / f"hook-{name}.sh"
    out.write_text(site_hook(venv, cfg))
    out.chmod(0o755)
    return out


def hook_calls(runs: int) -> list[Call]:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        tcp, unix = f"tcp:127.0.0.1:{free_port()}", f"unix:{tmp}/d.sock"
        got: list[Any] = []
        server = PrepServer([tcp, unix], "bench", got.append).start()
        variants = {
            "hook script, TCP socket (bash alone)": [str(script(tmp, tcp))],
            "hook script, UNIX socket (bash, then the Python hook)": [str(script(tmp, unix))],
            "Python hook alone (python3 -I -S, compiled)": [
                "/usr/bin/python3", "-I", "-S", "-c",
                HOOK_CMD.format(str(REPO / "ccadapter" / "prep")), "--socket", tcp],
            "floor: python3 -I -S -c pass": ["/usr/bin/python3", "-I", "-S", "-c", "pass"],
            "floor: bash -p -c :": ["/bin/bash", "-p", "-c", ":"],
        }
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
        try:
            subprocess.run(["/usr/bin/python3", "-m", "py_compile",
                            str(REPO / "ccadapter" / "prep" / "hook.py")], check=True)
            for _ in range(runs):
                for name, argv in variants.items():
                    samples[name].append(spawn_cost(argv, ENV))
            told = len(got)
        finally:
            server.stop()
    if told != 3 * runs:
        raise RuntimeError(f"the daemon's server heard {told} of {3 * runs} hook calls")
    return [Call(name, runs, round(statistics.median(c for c, _ in s), 2),
                 round(statistics.median(w for _, w in s), 2)) for name, s in samples.items()]


def _ms(stamp: str) -> float:
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float(stamp[19:])


def prolog_waits(log: Path, ids: set[int], offset: int) -> list[float]:
    """Allocate to "Configuration complete" per job, in ms, from slurmctld's log."""
    began: dict[int, float] = {}
    waits = []
    with log.open(errors="replace") as fh:
        fh.seek(offset)
        for line in fh:
            if m := ALLOCATE.match(line):
                began[int(m[2])] = _ms(m[1])
            elif (m := CONFIGURED.match(line)) and int(m[2]) in ids and int(m[2]) in began:
                waits.append((_ms(m[1]) - began[int(m[2])]) * 1000)
    return waits


def prolog_wall(cluster: Cluster, tmp: Path, jobs: int) -> dict[str, dict]:
    wrapper = Path(cluster.hook_also).with_suffix("")
    log = LOGS / cluster.name / "slurmctld.log"
    saved = wrapper.read_text()
    port = int(cluster.hook_socket.rsplit(":", 1)[1])
    shipped = script(tmp / "prolog", f"tcp:127.0.0.1:{port}")
    variants = {
        "Python hook alone": "#!/bin/sh\nexec /usr/bin/python3 -I -S -c \"" + HOOK_CMD.format(
            "/usr/local/lib/ccadapter") + f"\" --socket tcp:127.0.0.1:{port}\n",
        "hook script, TCP socket (bash alone)": f"#!/bin/sh\nexec {shipped}\n",
    }
    out: dict[str, dict] = {}
    with CcBackend(tmp / "cc-prolog", [cluster], commit_interval="5s") as cc:
        conf = site_config(cc.url, cc.token, tmp / "prolog-daemon", poll=600,
                           listen=cluster.hook_socket)
        LastRun(tmp / "prolog-daemon" / "lastrun").set(time.time() - 5)
        daemon = start_ccadapter(cluster, conf, tmp / "prolog-daemon.log")
        try:
            daemon.wait_log("listening for Prolog/Epilog")
            for name, text in variants.items():
                new = wrapper.with_suffix(".bench")
                new.write_text(text)
                new.chmod(0o755)
                new.replace(wrapper)
                offset = log.stat().st_size
                ids = [int(cluster.run("sbatch", "--parsable", "-J", f"fp{i}", "-o",
                                       "/dev/null", "--wrap", "sleep 1").split(";")[0])
                       for i in range(jobs)]
                until = time.time() + 120
                while time.time() < until and len(prolog_waits(log, set(ids), offset)) < jobs:
                    time.sleep(1)
                waits = prolog_waits(log, set(ids), offset)
                out[name] = {"jobs": len(waits), "p50_ms": round(statistics.median(waits), 1)
                             if waits else None, "max_ms": round(max(waits), 1) if waits
                             else None}
        finally:
            wrapper.write_text(saved)
            daemon.stop()
    return out


def rollup(text: str) -> dict[str, float]:
    """RSS and PSS (and the PSS of anonymous pages, the process's own) in MB, from the text
    of /proc/PID/smaps_rollup."""
    rows = dict(line.split(":", 1) for line in text.splitlines()[1:] if ":" in line)
    return {k.lower(): round(int(rows[k].split()[0]) / 1024, 1)
            for k in ("Rss", "Pss", "Pss_Anon")}


def floor(modules: tuple[str, ...]) -> dict[str, float]:
    code = ("import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
            "print(open('/proc/self/smaps_rollup').read())")
    return rollup(subprocess.run([sys.executable, "-c", code, *modules], capture_output=True,
                                 text=True, check=True, timeout=60).stdout)


def import_times() -> list[dict]:
    """Import time of ``ccadapter.daemon.app`` (``python -X importtime``), each module's own
    time summed by its top-level package; the standard library's as one. Compiled first, as
    pip installs it (a checkout's first import compiles every module)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "ccadapter")],
                   check=True, timeout=300)
    err = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import ccadapter.daemon.app"], capture_output=True, text=True,
                         check=True, timeout=60, cwd=REPO).stderr
    own: dict[str, int] = {}
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[0].split(":")[-1].strip().isdigit():
            continue
        pkg = parts[2].strip().split(".")[0]
        if pkg in sys.stdlib_module_names or pkg.startswith("_"):
            pkg = "standard library"
        own[pkg] = own.get(pkg, 0) + int(parts[0].split(":")[-1])
    return [{"package": p, "ms": round(us / 1000, 1)}
            for p, us in sorted(own.items(), key=lambda kv: -kv[1])[:10]]


def daemon_at_rest(cluster: Cluster, tmp: Path, idle: float) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for product in ("ccadapter", "cc-slurm-adapter"):
        with CcBackend(tmp / f"cc-{product}", [cluster], commit_interval="5s") as cc:
            conf = site_config(cc.url, cc.token, tmp / product, poll=10,
                               listen=str(tmp / product / "run" / "unused.sock"))
            LastRun(tmp / product / "lastrun").set(time.time() - 5)
            log = tmp / f"{product}.log"
            daemon = (start_ccadapter(cluster, conf, log) if product == "ccadapter"
                      else start_predecessor(cluster, conf, log))
            try:
                if product == "ccadapter":
                    daemon.wait_log("listening for Prolog/Epilog")
                else:
                    time.sleep(5)
                assert daemon.proc is not None
                pid = daemon.proc.pid
                start = sum(cpu_seconds(pid))
                time.sleep(idle)
                out[product] = {"start_cpu_s": round(start, 2),
                                "idle_cpu_s": round(sum(cpu_seconds(pid)) - start, 2),
                                "idle_s": idle,
                                   **rollup(Path(f"/proc/{pid}/smaps_rollup").read_text())}
            finally:
                daemon.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="hook calls of each variant")
    ap.add_argument("--jobs", type=int, default=30, help="jobs per PrologSlurmctld variant")
    ap.add_argument("--idle", type=float, default=120, help="seconds each daemon idles")
    ap.add_argument("--cluster", default="cluster2505")
    args = ap.parse_args(argv)
    plan = {"runs": args.runs, "jobs": args.jobs, "idle": args.idle, "cluster": args.cluster}
    [cluster] = [c for c in testbed_clusters() if c.name == args.cluster]
    began = time.time()
    with tempfile.TemporaryDirectory(prefix="ccadapter-footprint-") as tmpdir:
        tmp = Path(tmpdir)
        data: dict[str, Any] = {"release": cluster.version,
                                "hook": [asdict(c) for c in hook_calls(args.runs)]}
        data["prolog"] = prolog_wall(cluster, tmp, args.jobs)
        data["daemon"] = daemon_at_rest(cluster, tmp, args.idle)
    data["floor"] = {"bare interpreter": floor(()), "its libraries": floor(LIBRARIES)}
    data["imports"] = import_times()
    results.write("footprint", command=results.command_line("tests.bench.footprint", argv,
                                                            lock=True),
                  receiver="cc-backend 1.5.4", plan=plan, data=data,
                  took_s=time.time() - began)
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
