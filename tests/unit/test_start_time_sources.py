"""One run, one startTime (issue 13, item 1): a start must never be sent again with another
startTime. The outbox keys events by (cluster, jobId, startTime, kind), so two readings of one
run's start are two runs to ccadapter, and cc-backend 1.5 stores both as jobs while the first
is in its job cache (tests/unit/cc/test_rest_delivery_jobcache.py).

Where the startTime of one run could differ between ccadapter's sources, and what pins each:

1. The hook's fast path reads ``scontrol show job -d`` (local wall-clock text, converted with
   the daemon's zone); the poll reads sacct (epochs). They agree on every recorded test-bed
   snapshot. They differ when scontrol prints in another zone than the daemon reads with:
   ``slurmCommandPrefix`` running scontrol on another host or in a chroot whose zone differs,
   or a ``TZ`` that glibc reads otherwise than ``timefmt.local_zone`` ("", a POSIX rule like
   ``CET-1CEST,M3.5.0,M10.5.0/3``, an unknown name). Pinned: scontrol runs with
   ``SLURM_TIME_FORMAT=%s`` and prints epochs, and the zone reader follows glibc's rules.
2. The repeated hour when daylight saving ends: the fast path leaves the job to the poll.
3. A pending job's StartTime is an estimate: no start from it.
4. Nodes powered up for a job (power saving, ``--reboot``): slurmctld resets the job's
   StartTime once they are up and sends the new one to slurmdbd (Slurm 22.05.8
   src/slurmctld/job_mgr.c:9146-9160 ``job_config_fini``: "Resetting %pJ start time for node
   power up"; 24.11.5 job_mgr.c:9027; 26.05.3 job_mgr.c:9303). Until then the job is
   CONFIGURING (src/slurmctld/node_scheduler.c:2795-2806 at 22.05.8), and sacct shows it
   running with the first StartTime. Pinned: where slurmctld may boot a job's nodes (power
   saving, a node features plugin, the job's --reboot, or a config that cannot be read), a
   CONFIGURING job's start is not sent; its start goes out once slurmctld has reset StartTime
   and the job runs. Where it boots none, the StartTime is final at allocation, and the fast
   path sends the start from the first answer (ccadapter.slurm.nodeboot).
5. A requeued job's next run has another startTime by design: another run (the outbox stops
   the old run before it starts the new one; tests/unit/test_outbox.py).

Inputs are the recorded test-bed snapshots of each Slurm version; where a state cannot be
recorded on the test bed (no power saving, no DST), a recorded job is changed in one field,
as said at each test.
"""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ccadapter.outbox import Outbox, admin
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookEvent, HookMessage
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.retry import RetryPolicy
from ccadapter.slurm import timefmt
from ccadapter.slurm.collector import Collector
from tests.conftest import (
    VERSIONS,
    collector_settings,
    fixture_json,
    fixture_text,
    recorded_config,
)
from tests.fakeslurm import RecordedSlurm

_FMT = "%Y-%m-%dT%H:%M:%S"
_WALL = re.compile(r"(?<==)(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b")
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def printed_in(text: str, zone) -> str:
    """The recorded scontrol text (recorded in UTC) as scontrol prints it in ``zone``."""
    def one(m: re.Match) -> str:
        when = datetime.strptime(m[1], _FMT).replace(tzinfo=UTC)
        return when.astimezone(zone).strftime(_FMT)
    return _WALL.sub(one, text)


def as_epochs(text: str) -> str:
    """The recorded scontrol text as ``SLURM_TIME_FORMAT=%s scontrol ...`` prints it."""
    return _WALL.sub(lambda m: str(int(datetime.strptime(m[1], _FMT)
                                       .replace(tzinfo=UTC).timestamp())), text)


def block(text: str, job_id: int) -> str:
    """One job's paragraph of ``scontrol show job -d``."""
    for para in text.split("\n\n"):
        if para.lstrip().startswith(f"JobId={job_id} "):
            return para.strip("\n") + "\n"
    raise KeyError(job_id)


class SlurmHost(RecordedSlurm):
    """Slurm as the commands answer on a host whose zone is ``zone``: scontrol prints wall
    clock in it (epochs when asked with SLURM_TIME_FORMAT=%s, which the collector passes in
    argv so that it crosses ssh and chroot prefixes); sacct answers epochs."""

    def __init__(self, version: str, zone=UTC, scontrol: str | None = None,
                 sacct: str | None = None) -> None:
        meta = fixture_json(version, "testbed/workload.json")
        self.since = meta["since"]
        super().__init__(version, sacct or fixture_text(version, "testbed/sacct-window.json"),
                         scontrol or fixture_text(version, "testbed/scontrol-d-busy.txt"),
                         controller_script=lambda job_id: "", clock=lambda: self.since + 600)
        self.zone = zone

    @property
    def runner(self) -> SlurmHost:
        return self

    @property
    def scontrol(self) -> str:
        return self.controller

    @scontrol.setter
    def scontrol(self, text: str) -> None:
        self.controller = text

    @property
    def sacct(self) -> str:
        return json.dumps(self.doc)

    @sacct.setter
    def sacct(self, text: str) -> None:
        self.doc = self.listed = json.loads(text)

    def controller_text(self, env) -> str:
        epochs = (env or {}).get("SLURM_TIME_FORMAT") == "%s"
        return as_epochs(self.controller) if epochs else printed_in(self.controller, self.zone)

    def collector(self, daemon_zone=UTC) -> Collector:
        return Collector(self, collector_settings(slurmFetchJobScripts=False), tz=daemon_zone,
                         clock=lambda: self.since + 600)


def fast_and_poll(host: SlurmHost, daemon_zone) -> list[tuple[int, int, int]]:
    """(jobId, start from the fast path, start from the poll) of each run both see."""
    collector = host.collector(daemon_zone)
    ids = [int(m) for m in re.findall(r"^JobId=(\d+)", host.scontrol, re.M)]
    fast, _ = collector.controller_jobs(ids)
    polled = {j.job_id: j.start_time for j in collector.window(host.since).jobs if j.started}
    return [(j.job_id, j.start_time, polled[j.job_id]) for j in fast
            if j.started and j.job_id in polled]


# --- 1. wall-clock text against epochs ---------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_path_and_poll_agree_on_every_recorded_start(version, tmp_path):
    host = SlurmHost(version)
    both = fast_and_poll(host, UTC)
    assert len(both) >= 4  # the workload's started jobs slurmctld held at the busy moment
    assert [(j, f) for j, f, p in both if f != p] == []
    # one outbox takes both sightings of each run as one run
    collector = host.collector(UTC)
    fast, _ = collector.controller_jobs([j for j, _, _ in both])
    box = Outbox(tmp_path / "o.sqlite")
    box.enqueue([e for job in fast for e in events_for(job)])
    box.enqueue([e for job in collector.window(host.since).jobs for e in events_for(job)])
    starts = [(e["jobId"], e["startTime"])
              for e in admin.list_events(box.store, kind="start", limit=1000)]
    assert len(starts) == len({j for j, _ in starts})  # no job id with two startTimes
    box.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_path_start_time_does_not_depend_on_the_zone_scontrol_runs_in(version):
    """Found by this test: the fast path converted scontrol's wall-clock text with the
    daemon's zone while scontrol printed in its own (another host or chroot through
    slurmCommandPrefix). It now runs `env SLURM_TIME_FORMAT=%s scontrol` and reads epochs."""
    host = SlurmHost(version, zone=NEW_YORK)  # e.g. slurmCommandPrefix ["ssh", "ctld"]
    both = fast_and_poll(host, UTC)
    assert both and [(j, f - p) for j, f, p in both if f != p] == []


@pytest.fixture
def berlin_localtime(monkeypatch):
    """/etc/localtime says Europe/Berlin (this machine's says UTC)."""
    real = Path

    def path(p, *rest):
        if str(p) == "/etc/localtime" and not rest:
            return real("/usr/share/zoneinfo/Europe/Berlin")
        return real(p, *rest)
    monkeypatch.setattr(timefmt, "Path", path)


JULY = datetime(2026, 7, 1, 12, 0)


def offset_hours(tz) -> float:
    return JULY.replace(tzinfo=tz).utcoffset().total_seconds() / 3600


@pytest.mark.parametrize(("tz", "hours"), [
    (None, 2), ("Europe/Berlin", 2), (":Europe/Berlin", 2), ("UTC", 0),
    # glibc (tzset.c): an empty TZ is UTC; a POSIX rule is read as a rule; an unknown name
    # is UTC. Found by this test: timefmt.local_zone read /etc/localtime for "" and raised
    # ZoneInfoNotFoundError for the others (sacct's window bounds off by the offset, or a
    # traceback at start); it now reads TZ as glibc does (timefmt.GlibcZone).
    ("", 0), ("UTC0", 0), ("CET-1CEST,M3.5.0,M10.5.0/3", 2), ("Etc/Nowhere", 0),
])
def test_local_zone_reads_tz_as_glibc_does(monkeypatch, berlin_localtime, tz, hours):
    if tz is None:
        monkeypatch.delenv("TZ", raising=False)
    else:
        monkeypatch.setenv("TZ", tz)
    assert offset_hours(timefmt.local_zone()) == hours


# --- 2. the repeated hour, 3. a pending job's estimate -----------------------------------------


def one_job_host(version: str, name: str, **fields: str) -> tuple[SlurmHost, int]:
    """A host whose slurmctld holds one recorded job, ``fields`` (Key=value) changed."""
    job_id = fixture_json(version, "testbed/workload.json")["ids"][name][0]
    text = block(fixture_text(version, "testbed/scontrol-d-busy.txt"), job_id)
    for key, value in fields.items():
        text, n = re.subn(rf"\b{key}=\S+", f"{key}={value}", text)
        assert n >= 1, key
    return SlurmHost(version, scontrol=text), job_id


@pytest.mark.parametrize("version", VERSIONS)
def test_a_start_in_the_repeated_hour_is_exact(version):
    # the recorded running GPU job, its times moved into 2026-10-25 02:00-03:00 (Berlin),
    # which happens twice; the host prints in Berlin time, the daemon reads in Berlin time.
    # Wall-clock text could not say which 02:30 it was (the fast path left such a job to
    # the poll); the epochs scontrol prints now say it exactly.
    host, job_id = one_job_host(version, "gpujob", SubmitTime="2026-10-24T23:00:00",
                                StartTime="2026-10-25T00:30:00")  # UTC: 02:30 CEST
    host.zone = BERLIN
    (job,), missing = host.collector(BERLIN).controller_jobs([job_id])
    assert missing == []
    assert job.start_time == int(datetime(2026, 10, 25, 0, 30, tzinfo=UTC).timestamp())


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_pending_jobs_estimated_start_sends_nothing(version):
    # the recorded pending "excl" job (waiting for whole nodes), with the StartTime that
    # the backfill scheduler's estimate puts there instead of Unknown
    host, job_id = one_job_host(version, "excl", StartTime="2026-11-22T00:10:00")
    (job,), _ = host.collector().controller_jobs([job_id])
    assert job.state == "PENDING" and not job.started and events_for(job) == []


# --- 4. CONFIGURING while nodes power up ------------------------------------------------------


def wait(pred, timeout: float = 5.0) -> bool:
    until = time.monotonic() + timeout
    while not pred() and time.monotonic() < until:
        time.sleep(0.01)
    return pred()


BOOTED = 120  # seconds the nodes took to power up


@pytest.fixture
def started(tmp_path):
    """A fast path over a host, with a real outbox; stopped at the end."""
    made = []

    def start(host: SlurmHost, **timings: float) -> tuple[FastPath, Outbox, threading.Event]:
        box = Outbox(tmp_path / f"o{len(made)}.sqlite")
        woken = threading.Event()
        fast = FastPath(host.collector(), box, woken.set,
                        retry=RetryPolicy(0.05, 0.05, 3), **timings).start()
        made.append((fast, box))
        return fast, box, woken
    yield start
    for fast, box in made:
        fast.stop()
        box.close()


# Configs under which slurmctld may reset a CONFIGURING job's StartTime: power saving, a node
# features plugin that reboots nodes, none said (not a config: assumed); and a job of its own
# --reboot on a cluster that boots nodes otherwise never.
MAY_BOOT = {
    "power saving": ({"ResumeProgram": "/usr/local/sbin/resume",
                      "SuspendProgram": "/usr/local/sbin/suspend"}, "0"),
    "node features": ({"NodeFeaturesPlugins": "node_features/helpers"}, "0"),
    "config unknown": (None, "0"),
    "--reboot": ({}, "1"),
}
BOOTS_NONE = ["22.05", "24.11"]  # 26.05's config cannot say (PowerAction): it always waits


@pytest.mark.parametrize(("version", "case"), [
    *((version, case) for case in MAY_BOOT for version in VERSIONS),
    ("26.05", "26.05 config"),  # the recorded one: no boot settings, but PowerAction unseen
])
def test_fast_path_sends_no_start_before_the_job_leaves_configuring_where_nodes_may_boot(
        version, case, started):
    settings, reboot = MAY_BOOT.get(case, ({}, "0"))
    host, job_id = one_job_host(version, "gpujob", JobState="CONFIGURING", Reboot=reboot)
    host.config = "" if settings is None else recorded_config(version, **settings)
    recorded = host.scontrol
    start = re.search(r"StartTime=(\S+)", recorded)[1]
    later = datetime.strptime(start, _FMT).replace(tzinfo=UTC).timestamp() + BOOTED
    fast, box, woken = started(host)
    fast.submit(HookMessage(job_id, HookEvent.START, None))
    assert wait(lambda: len(host.runner.stdins) >= 2 and not fast._pending
                and not fast._later)  # asked again while CONFIGURING
    time.sleep(0.3)  # the last query's outcome is stored
    assert admin.list_events(box.store, kind="start") == []
    # the nodes are up: RUNNING, StartTime reset (job_mgr.c job_config_fini)
    reset = datetime.fromtimestamp(later, UTC).strftime(_FMT)
    host.scontrol = recorded.replace(f"StartTime={start}", f"StartTime={reset}") \
        .replace("JobState=CONFIGURING", "JobState=RUNNING")
    fast.submit(HookMessage(job_id, HookEvent.START, None))
    assert wait(woken.is_set)
    assert [e["startTime"] for e in admin.list_events(box.store, kind="start")] == [int(later)]


@pytest.mark.parametrize("version", BOOTS_NONE)
def test_fast_path_sends_a_configuring_start_at_once_where_slurmctld_boots_no_nodes(
        version, started):
    """No node can be booted for the job, so slurmctld never resets its StartTime
    (ccadapter.slurm.nodeboot): the start goes out from the first answer, while slurmctld
    still holds the job CONFIGURING for its PrologSlurmctld, with no settle time and no
    second question."""
    host, job_id = one_job_host(version, "gpujob", JobState="CONFIGURING")
    host.config = recorded_config(version)
    start = re.search(r"StartTime=(\S+)", host.scontrol)[1]
    fast, box, woken = started(host, start_settle=2.0)
    assert wait(lambda: fast._settle() == 0.0)  # its config, read at start
    asked = time.monotonic()
    fast.submit(HookMessage(job_id, HookEvent.START, None))
    assert wait(woken.is_set)
    assert time.monotonic() - asked < 1.0  # not the 2 s it would settle where nodes may boot
    (event,) = admin.list_events(box.store, kind="start")
    assert event["startTime"] == int(datetime.strptime(start, _FMT).replace(tzinfo=UTC)
                                     .timestamp())
    (due,) = box.queue.due()
    assert due.payload["jobState"] == "running" and due.payload["resources"]
    assert len(host.runner.stdins) == 1  # one question for the job


@pytest.mark.parametrize(("state", "starts"), [
    ("RUNNING", 1),
    ("CONFIGURING", 0),  # found by this test; now left until the nodes are up
])
def test_poll_sends_no_start_while_slurmctld_shows_configuring(state, starts):
    version = "24.11"
    host, job_id = one_job_host(version, "gpujob", JobState=state)
    # sacct while the job runs (or its nodes boot): the recorded run without its end
    doc = json.loads(host.sacct)
    (rec,) = [r for r in doc["jobs"] if r["job_id"] == job_id]
    rec["state"]["current"] = ["RUNNING"]
    rec["time"]["end"] = 0
    doc["jobs"] = [rec]
    host.sacct = json.dumps(doc)
    events = [e for j in host.collector().window(host.since).jobs for e in events_for(j)]
    assert [(e.job_id, e.kind) for e in events] == [(job_id, "start")] * starts
