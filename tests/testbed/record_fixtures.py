"""Record real Slurm outputs of the workload mix from the test bed into tests/fixtures/.

Run as root with the test bed up:  .venv/bin/python -m tests.testbed.record_fixtures
(``--cluster-lists``: only the cluster lists below, without the workload; ``--steps``: only
tests/fixtures/<version>/steps-busy.json, slurmctld's step list and its job list of running
jobs at one moment of the workload; ``--versions 23.02,25.11``: only those clusters).
For a version without the shared reference recordings of 22.05, 24.11 and 26.05, the same
workload also gives the single commands those recordings hold, in tests/fixtures/<version>/:
  sacct-window.json    sacct --allusers --starttime START --endtime now --json, after all ended
  scontrol-d-N.txt     scontrol show job -d N of the multi-node job and the GPU job, while each
                       runs
Writes tests/fixtures/<version>/sacctmgr-clusters.txt (22.05: parsable text) or .json (24.11
and later): the cluster list as the generation's parser reads it (every cluster of that
slurmdbd: on 22.05 cluster22 and clusterscale, once the scale profile has been up), and
tests/fixtures/<version>/testbed/:
  workload.json        name -> raw job ids, and the window start
  squeue-busy.json     squeue --json while most of the workload runs
  scontrol-d-busy.txt  scontrol show job -d (all jobs) at the same moment
  sacct-window.json    sacct --json --allusers --duplicates over the window, after all ended
  scontrol-d-final.txt scontrol show job -d (all jobs) after all ended (no GPU indices left)
  sacct-scripts.json   sacct --json -B -j IDS (24.11 and later only)
  commands-busy.json   every command the collector runs, with its answer (tests/recorded.py),
  commands-final.json  while most of the workload runs / after all ended: the window as
                       `ccadapter jobs` reads it, the reconcilers' run listings, the fast
                       path's scontrol process (and the dump route), the node states; and
                       the het job as stale-jobs and cc-cache ask for it (by the leader's
                       id) and as the fast path reads it (told of every component, or of a
                       non-leader component alone)
  hook-hetjob.json     the Prolog/Epilog hook's messages for the het job's components, as
                       slurmctld sent them (one prolog and one epilog per component)
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ccadapter.slurm.collector import Collector, CollectorSettings, RouteCosts
from ccadapter.slurm.formats import format_for
from ccadapter.slurm.formats.listing import STEP_FIELDS
from ccadapter.slurm.formats.text import version_from_text
from ccadapter.slurm.runner import SlurmRunner
from tests.integration.workload import (
    RUNNING_JOBS,
    Cluster,
    Submitted,
    drive,
    running_leaders,
    submit,
    testbed_clusters,
    wait_running,
)
from tests.recorded import RecordingRunner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UNKNOWN_JOB = 999_999  # asked for on purpose: slurmctld's answer to a job it does not hold


def record_commands(cluster: Cluster, sub: Submitted, path: Path) -> None:
    """The collector's own commands against the cluster, as they run in the product."""
    now = time.time()
    runner = RecordingRunner(SlurmRunner(cluster.prefix))
    settings = CollectorSettings()
    collector = Collector(runner, settings, clock=lambda: now)
    since = sub.submitted_at - 5
    ids = sub.all_ids()
    collector.window(since)  # `ccadapter jobs`: every job of the window, pending ones too
    collector.stamps(since)  # slurm-window and backfill: the runs that ran
    collector.stamps_of(ids)  # stale-jobs: the runs of given jobs
    collector.controller_jobs([*ids, UNKNOWN_JOB], scripts_for=ids)  # the fast path
    dump = Collector(runner, settings, clock=lambda: now, costs=RouteCosts(
        min_dump=1, first_dump=1, held_jobs=lambda: 10))
    dump.controller_jobs(ids)  # many jobs at once: the filtered dump
    het = sub.ids["hetjob"]
    collector.stamps_of(het[:1])  # stale-jobs: an open het job, by its leader's id
    collector.jobs_by_id(het[:1], starts=())  # stale-jobs and cc-cache read it in detail
    collector.controller_jobs(het, scripts_for=het)  # the fast path: every prolog
    collector.controller_jobs(het[1:], scripts_for=het[1:])  # a component's epilog alone
    collector.nodes()
    runner.save(path, cluster=cluster.name, version=cluster.version, now=now, since=since,
                tz=time.tzname[0], ids=sub.ids)


def record_cluster_list(cluster: Cluster) -> Path:
    """``sacctmgr`` with the arguments the cluster's generation reads its cluster list
    from (``ccadapter.slurm.clusters``)."""
    version = version_from_text(cluster.run("sacctmgr", "-V"), "sacctmgr -V")
    args = format_for(version, "sacctmgr list clusters").CLUSTER_LIST_ARGS
    out = FIXTURES / cluster.short / ("sacctmgr-clusters.json" if "--json" in args
                                      else "sacctmgr-clusters.txt")
    out.write_text(cluster.run("sacctmgr", *args))
    return out


class HookListener:
    """Takes the test-bed hook's messages (it sends to the daemon's port; no daemon runs
    while fixtures are recorded) and keeps them, answering as the daemon does."""

    def __init__(self, spec: str) -> None:
        host, _, port = spec.removeprefix("tcp:").rpartition(":")
        self.sock = socket.create_server((host, int(port)))
        self.sock.settimeout(0.5)
        self.messages: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(b"ok")
            self.messages.append(json.loads(data))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


# the versions whose single commands come from the shared reference recordings
REFERENCE_VERSIONS = ("22.05", "24.11", "26.05")


def record(cluster: Cluster) -> Path:
    out = FIXTURES / cluster.short / "testbed"
    out.mkdir(parents=True, exist_ok=True)
    singles = cluster.short not in REFERENCE_VERSIONS
    hook = HookListener(cluster.hook_socket)

    def single(job_id: int) -> None:
        (out.parent / f"scontrol-d-{job_id}.txt").write_text(
            cluster.run("scontrol", "show", "job", "-d", str(job_id)))

    def snapshot(sub: Submitted) -> None:
        (out / "squeue-busy.json").write_text(cluster.run("squeue", "--json"))
        (out / "scontrol-d-busy.txt").write_text(cluster.run("scontrol", "show", "job", "-d"))
        if singles:
            single(sub.ids["gpujob"][0])
        record_commands(cluster, sub, out / "commands-busy.json")

    sub = submit(cluster)
    if singles:  # the multi-node job runs 8 s, ended before the busy snapshot
        wait_running(cluster, sub.ids["multinode"][0])
        single(sub.ids["multinode"][0])
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(sub.submitted_at - 5))
    try:
        drive(sub, while_busy=snapshot)
        time.sleep(2)
    finally:
        hook.close()
    het = {str(i) for i in sub.ids["hetjob"]}
    (out / "hook-hetjob.json").write_text(json.dumps(
        [m for m in hook.messages if m.get("SLURM_JOB_ID") in het], indent=1) + "\n")
    (out / "sacct-window.json").write_text(cluster.run(
        "sacct", "--json", "--allusers", "--duplicates", "--starttime", start, "--endtime", "now"))
    if singles:
        (out.parent / "sacct-window.json").write_text(cluster.run(
            "sacct", "--allusers", "--starttime", start, "--endtime", "now", "--json"))
    if cluster.short != "22.05":
        ids = ",".join(map(str, sub.all_ids()))
        (out / "sacct-scripts.json").write_text(cluster.run(
            "sacct", "--json", "--allusers", "--duplicates", "-B", "--jobs", ids))
    (out / "scontrol-d-final.txt").write_text(cluster.run("scontrol", "show", "job", "-d"))
    record_commands(cluster, sub, out / "commands-final.json")
    record_cluster_list(cluster)
    (out / "workload.json").write_text(json.dumps(
        {"cluster": cluster.name, "version": cluster.version, "since": sub.submitted_at - 5,
         "ids": sub.ids}, indent=1) + "\n")
    return out


def record_steps(cluster: Cluster) -> Path:
    """slurmctld's step list (what polls read for the jobs that run now) and its job list of
    running jobs at one moment while the workload runs (array tasks, the het job, the GPU job),
    no job configuring: the pair the step list's parser is tested against."""
    sub = submit(cluster)
    out = FIXTURES / cluster.short / "steps-busy.json"
    taken: dict = {}

    def snapshot(_: Submitted) -> None:
        for _try in range(20):
            jobs = cluster.run(*RUNNING_JOBS)
            steps = cluster.run("squeue", "--all", "-h", "-s", "-O", STEP_FIELDS)
            if running_leaders(jobs) is not None and jobs == cluster.run(*RUNNING_JOBS):
                taken.update(jobs=jobs, steps=steps, step_fields=STEP_FIELDS)
                return
            time.sleep(0.5)
        raise RuntimeError(f"{cluster.name}: jobs kept changing")

    drive(sub, while_busy=snapshot)
    out.write_text(json.dumps(taken, indent=1) + "\n")
    return out


def main() -> None:
    args = sys.argv[1:]
    clusters = testbed_clusters()
    if "--versions" in args:
        at = args.index("--versions")
        wanted = set(args[at + 1].split(","))
        clusters = [c for c in clusters if c.short in wanted]
        del args[at:at + 2]
    if not clusters:
        raise SystemExit("no test-bed cluster (of those asked for) is up: run "
                         "tests/testbed/slurm up")
    if args == ["--cluster-lists"]:
        for cluster in clusters:
            print(f"recorded {record_cluster_list(cluster)}")
        return
    if args == ["--steps"]:
        with ThreadPoolExecutor(len(clusters)) as pool:
            for path in pool.map(record_steps, clusters):
                print(f"recorded {path}")
        return
    with ThreadPoolExecutor(len(clusters)) as pool:
        for path in pool.map(record, clusters):
            print(f"recorded {path}")


if __name__ == "__main__":
    main()
