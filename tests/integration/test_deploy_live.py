"""Issue 29: ccadapter deployed as a site deploys it, under a real systemd (252, booted by
systemd-nspawn: tests/testbed/deploy), run by the unit of systemd/ unchanged as the
unprivileged user cc-slurm-adapter, on a cluster whose SlurmUser is slurm and whose
PrologSlurmctld/EpilogSlurmctld run the shipped hook script as slurm. Everything is installed
by the README's own install block, with the modes it gives.

The suite runs beside the main one in tests/run (marker ``deploy``; most of it waits for
systemd's timers), in this order: a start, the hardening, the journal, a reader of the state
who may not write, a Slurm that does not answer for 3 minutes, a hung daemon, a 3-day
catch-up, a stop.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.ccbackend import CcBackend
from tests.integration.deployment import CONFIG, Container, install
from tests.integration.sync_scenario import exactly_once, submit_batch, wait_for
from tests.testbed import history

pytestmark = [pytest.mark.integration, pytest.mark.deploy]

WATCHDOG_SEC = 120  # the unit's WatchdogSec
START_TIMEOUT = 90  # systemd's default TimeoutStartSec, which the unit keeps


def unit_value(key: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "systemd" / "ccadapter.service").read_text()
    return re.search(rf"^{key}=(.*)$", text, re.M)[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The container with ccadapter installed and started as the README says, and the
    real cc-backend 1.5.4 it delivers to (on the host's loopback, which the container
    shares). The daemon talks to cc-backend itself, not through the fault proxy: no test
    here makes cc-backend fail, and the catch-up's 40,000 events would wait on the proxy."""
    container = Container.up()
    cc = CcBackend(tmp_path_factory.mktemp("cc-backend"), [container.cluster]).start()
    try:
        install(container, tmp_path_factory.mktemp("site"), cc.server_url, cc.token)
        yield container, cc
    finally:
        container.run("systemctl", "stop", "ccadapter", check=False)
        cc.stop()


def test_a_site_install_starts_ready_and_delivers_through_the_hook(site):
    container, cc = site
    container.wait_active()
    shown = container.show("ActiveState", "SubState", "StatusText", "User", "Group",
                           "NRestarts", "After")
    assert (shown["ActiveState"], shown["SubState"]) == ("active", "running")
    # windows are bounded by this host's clock: started once it is synchronized (issue 35)
    assert "time-sync.target" in shown["After"].split()
    assert shown["StatusText"] == "first Slurm window synced"
    pid = container.main_pid()
    owner = container.run("ps", "-o", "user:32=,group:32=", "-p", str(pid)).split()
    assert owner == ["cc-slurm-adapter", "slurm"]
    # the hook (the shipped script, run by slurmctld as slurm) announces them: delivered well
    # before the next poll (slurmPollInterval 60 s)
    ids = submit_batch(container.cluster, "deployed", 4)
    wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 45,
             "not delivered within 45 s: the hook did not reach the daemon")
    assert exactly_once(cc, container.cluster, ids) == []
    log = (container.root / "var/log/slurm/slurmctld.log").read_text()
    assert "daemon not told" not in log
    config = container.run("stat", "-c", "%a %U:%G", CONFIG).split()
    jwt = container.run("stat", "-c", "%a %U:%G", "/etc/cc-slurm-adapter/jwt").split()
    assert (config, jwt) == (["644", "root:root"], ["640", "root:cc-slurm-adapter"])
    # what an administrator sees (pytest -s shows it)
    print("\n# systemctl status ccadapter\n" + container.run(
        "systemctl", "status", "ccadapter", "--no-pager", "-n", "0", check=False) +
        "# journalctl -u ccadapter -b\n" + container.run(
        "journalctl", "-u", "ccadapter", "-b", "--no-pager", "-n", "25", check=False))


def test_the_hardening_is_in_force(site):
    container, _ = site
    container.wait_active()
    pid = str(container.main_pid())
    status = container.run("cat", f"/proc/{pid}/status")
    assert re.search(r"^CapEff:\s+0+$", status, re.M), status
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M)
    etc = container.run("nsenter", "-t", pid, "-m", "sh", "-c",
                        "touch /etc/ccadapter-probe 2>&1; echo rc=$?", check=False)
    assert "Read-only file system" in etc and "rc=1" in etc
    container.run("touch", "/tmp/ccadapter-container-probe")
    private = container.run("nsenter", "-t", pid, "-m", "ls", "-a", "/tmp")
    assert "ccadapter-container-probe" not in private  # a /tmp of its own


def test_the_journal_says_what_an_operator_needs_and_no_line_per_event(site):
    container, cc = site
    lines = container.journal()
    text = "\n".join(lines)
    assert "serving cluster clusterdeploy" in text
    assert "listening for Prolog/Epilog messages on /run/cc-slurm-adapter/daemon.sock" in text
    delivered = len(cc.started(container.cluster.name)) + len(cc.stopped())
    assert delivered >= 8
    assert not [ln for ln in lines if "delivered start" in ln or "delivered stop" in ln]
    assert not [ln for ln in lines if re.search(r"slurm-window: \{", ln)]
    assert "Traceback" not in text and cc.token not in text


def test_status_and_queue_list_for_a_user_who_may_only_read_the_state(site):
    """slurm, in the unit's Group=, may read the state directory (0750) but not write it."""
    container, _ = site
    mode = container.run("stat", "-c", "%a %U:%G", "/var/lib/cc-slurm-adapter").split()
    assert mode == ["750", "cc-slurm-adapter:slurm"]
    for command in (["status", "--format", "json"], ["queue", "list", "--status", "all"]):
        out = container.run("runuser", "-u", "slurm", "--", "/opt/ccadapter/bin/ccadapter",
                            *command, "--config", CONFIG)
        assert out.strip(), command
    assert '"exists": true' in container.run("runuser", "-u", "slurm", "--",
                                             "/opt/ccadapter/bin/ccadapter", "status",
                                             "--format", "json", "--config", CONFIG)


def test_a_slurm_that_does_not_answer_for_3_minutes_does_not_get_it_killed(site):
    container, cc = site
    container.wait_active()
    pid, restarts = container.main_pid(), container.show("NRestarts")["NRestarts"]
    container.run("systemctl", "kill", "-s", "SIGSTOP", "slurmdbd", "slurmctld")
    try:
        time.sleep(180)  # longer than WatchdogSec: polls and their retries time out meanwhile
        assert container.main_pid() == pid
        assert container.show("NRestarts")["NRestarts"] == restarts
    finally:
        container.run("systemctl", "kill", "-s", "SIGCONT", "slurmdbd", "slurmctld")
    ids = submit_batch(container.cluster, "afterstall", 2)
    wait_for(lambda: {b["jobId"] for b in cc.stopped()} >= set(ids), 120,
             "nothing delivered after Slurm answered again")
    assert container.main_pid() == pid


def test_a_hung_daemon_is_killed_and_restarted(site):
    container, _ = site
    container.wait_active()
    assert int(unit_value("WatchdogSec")) == WATCHDOG_SEC
    pid, restarts = container.main_pid(), int(container.show("NRestarts")["NRestarts"])
    since = container.now()
    container.run("systemctl", "kill", "-s", "SIGSTOP", "--kill-whom=main", "ccadapter")
    wait_for(lambda: int(container.show("NRestarts")["NRestarts"]) > restarts,
             WATCHDOG_SEC + 60 + 60, "the stopped daemon was not restarted")
    container.wait_active()
    assert container.main_pid() != pid
    assert any("Watchdog timeout" in ln for ln in container.run(
        "journalctl", "--no-pager", "-o", "cat", "--since", since).splitlines())


@pytest.mark.timeout(1800)  # a start of minutes, then 40,000 events into cc-backend
def test_a_3_day_catch_up_starts_without_hitting_the_start_timeout(site):
    """lastRun three days back over a history of 20,000 runs, and a slurmdbd that answers
    only a minute after the start (a busy one after a downtime): the first window takes
    longer than TimeoutStartSec, and systemd waits for its READY=1 all the same."""
    container, cc = site
    container.run("systemctl", "stop", "ccadapter")
    rows = history.spread(20_000, 3 * 86400, "slurm_acct_clusterdeploy", "clusterdeploy")
    assert rows >= 20_000
    # the copies end over the 3 days before the last ten minutes: lastRun a quarter of an
    # hour before the oldest, so that the first window (from lastRun) covers all of them
    three_days = time.strftime("%Y-%m-%d %H:%M:%S",
                               time.localtime(time.time() - 3 * 86400 - 900))
    container.run("touch", "-d", three_days, "/var/lib/cc-slurm-adapter/lastrun")
    container.run("systemctl", "kill", "-s", "SIGSTOP", "slurmdbd")
    started = time.monotonic()
    try:
        container.run("systemctl", "start", "--no-block", "ccadapter")
        time.sleep(60)
    finally:
        container.run("systemctl", "kill", "-s", "SIGCONT", "slurmdbd")
    container.wait_active(timeout=900)
    took = time.monotonic() - started
    shown = container.show("Result", "NRestarts", "StatusText")
    print(f"\nstarted (READY=1) {took:.0f} s after systemctl start; {rows} runs in slurmdbd")
    assert took > START_TIMEOUT and shown["Result"] == "success"
    assert shown["StatusText"] == "first Slurm window synced"
    # the first window stored them all; the deliverers send them on
    sent = time.monotonic()
    wait_for(lambda: cc.job_rows(history.FIRST_COPY_ID) >= 20_000, 900,
             "the history caught up on was not delivered")
    print(f"cc-backend took in the 20,000 starts {time.monotonic() - sent:.0f} s after READY")
    # each stop moves its job from cc-backend's job cache to its job table: read what it
    # holds once no copy is left in the cache (a listing beside the moves would miss some)
    wait_for(lambda: cc.cached(history.FIRST_COPY_ID) == 0, 900,
             "the stops of the history caught up on were not delivered")
    print(f"and their 20,000 stops {time.monotonic() - sent:.0f} s after READY")
    cc.wait_committed()
    held = cc.started(container.cluster.name)
    copies = {b["jobId"] for b in held if b["jobId"] >= history.FIRST_COPY_ID}
    print(f"cc-backend holds {len(held)} jobs of {container.cluster.name}, "
          f"{len(copies)} of the history's copies")
    assert len(copies) == 20_000


def test_systemctl_stop_during_a_catch_up_ends_it_within_seconds(site):
    """Issue 35, item 10: SIGTERM was read between two routines only. A catch-up whose
    Slurm commands wait for a slurmdbd that does not answer then held the stop until
    systemd killed the daemon (TimeoutStopSec, 60 s). The stop is now read by the window
    between its batches and by the Slurm command it waits for: the daemon is out in
    seconds, cleanly, and the next start reads what the stop cut short."""
    container, _ = site
    container.run("systemctl", "stop", "ccadapter")
    three_days = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - 3 * 86400))
    container.run("touch", "-d", three_days, "/var/lib/cc-slurm-adapter/lastrun")
    container.run("systemctl", "kill", "-s", "SIGSTOP", "slurmdbd")
    try:
        container.run("systemctl", "start", "--no-block", "ccadapter")
        time.sleep(20)  # the first window's sacct waits for slurmdbd
        asked = time.monotonic()
        container.run("systemctl", "stop", "ccadapter", timeout=120)
        took = time.monotonic() - asked
    finally:
        container.run("systemctl", "kill", "-s", "SIGCONT", "slurmdbd")
    shown = container.show("ActiveState", "Result", "ExecMainStatus")
    print(f"\nsystemctl stop during the catch-up took {took:.1f} s: {shown}")
    assert took < 10, took
    assert (shown["ActiveState"], shown["Result"], shown["ExecMainStatus"]) == (
        "inactive", "success", "0")
    container.run("systemctl", "start", "--no-block", "ccadapter")
    container.wait_active(timeout=600)
    assert container.show("StatusText")["StatusText"] == "first Slurm window synced"


def test_stop_is_clean(site):
    container, _ = site
    container.wait_active()
    container.run("systemctl", "stop", "ccadapter")
    shown = container.show("ActiveState", "Result", "ExecMainStatus")
    assert (shown["ActiveState"], shown["Result"], shown["ExecMainStatus"]) == (
        "inactive", "success", "0")
    assert "stopped" in container.journal()[-3:][-1] or any(
        ln.endswith("stopped") for ln in container.journal()[-5:])
