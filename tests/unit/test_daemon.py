"""The daemon loop, the PID lock and the lifecycle state machine."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ccadapter.daemon.deliverer import DeliveryStats
from ccadapter.daemon.loop import Daemon
from ccadapter.model import Job, Resource, Shared
from ccadapter.reconcilers.lifecycle import events_for
from ccadapter.runtime.lastrun import LastRun
from ccadapter.runtime.pidlock import AlreadyRunning, PidLock


class FakeTime:
    """The daemon's clock and wait: a wait returns at once, the time moved on by its
    timeout (or not at all when the event was set: a wake)."""

    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def wait(self, event, timeout):
        if not event.is_set():
            self.now += timeout
        return event.is_set()


def paced(deliverer=None):
    """A daemon on fake time."""
    t = FakeTime()
    return Daemon(deliverer or IdleDeliverer(), clock=t.clock, wait=t.wait,
                  idle_delivery_wait=0.01), t


def wait_until(pred, timeout=5.0):
    """For the lanes, which are threads: poll until ``pred()`` (or fail after timeout)."""
    until = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < until, "condition not met in time"
        time.sleep(0.005)


class IdleDeliverer:
    def __init__(self):
        self.calls = 0

    def run_once(self, stopping=lambda: False):
        self.calls += 1
        return DeliveryStats()


def test_routines_run_at_start_on_their_intervals_and_survive_failures():
    d, t = paced()
    runs = {"fast": 0, "slow": 0, "broken": 0}

    def make(name, fail=False):
        def fn():
            runs[name] += 1
            if fail:
                raise RuntimeError("boom")
            return {}
        return fn

    d.add_routine(make("fast"), 0.0625, "fast")  # (binary fractions: exact sums)
    d.add_routine(make("slow"), 60, "slow")
    d.add_routine(make("broken", fail=True), 0.0625, "broken")
    d.run(max_cycles=10)
    assert runs["slow"] == 1  # first cycle at start, not after one interval
    assert runs["fast"] == 10 and runs["broken"] == 10 and t.now == 9 * 0.0625
    assert d.routines[2].last_error == "RuntimeError: boom"
    assert d.deliverer.calls >= 1


def test_a_cluster_whose_slurm_hangs_delays_its_own_lane_only(caplog):
    """slurmClusters: each cluster's routines run in a thread of their own."""
    d = Daemon(IdleDeliverer(), idle_delivery_wait=0.01)
    released = threading.Event()
    runs = {"a": 0, "b": 0, "main": 0}

    def hung():  # a command that runs into slurmCommandTimeout
        runs["a"] += 1
        released.wait(5)
        raise RuntimeError("scontrol: no answer within 60 s (killed)")

    def count(name):
        def fn():
            runs[name] += 1
            return {}
        return fn

    d.add_routine(hung, 0.05, "nodestate", cluster="a")
    d.add_routine(count("b"), 0.05, "nodestate", cluster="b")
    d.add_routine(count("main"), 0.05, "compact")
    t = threading.Thread(target=d.run)
    t.start()
    wait_until(lambda: runs["b"] >= 4 and runs["main"] >= 4)
    assert runs["a"] == 1  # still in its first cycle
    released.set()
    wait_until(lambda: runs["a"] >= 2)
    d.stop()
    t.join(10)
    assert not t.is_alive()
    assert "nodestate[a] failed: RuntimeError: scontrol: no answer" in caplog.text
    assert [r.label for r in d.routines] == ["nodestate[a]", "nodestate[b]", "compact"]


def test_a_failed_routine_comes_again_after_its_retry_interval():
    d, t = paced()
    runs = {"failing": 0, "fine": 0}

    def failing():
        runs["failing"] += 1
        raise RuntimeError("sacctmgr: slurmdbd down")

    def fine():
        runs["fine"] += 1

    d.add_routine(failing, 3600, "slurm-clusters", retry=0.0625)
    d.add_routine(fine, 3600, "compact", retry=0.0625)
    d.run(max_cycles=5)
    assert runs["failing"] == 5 and runs["fine"] == 1 and t.now == 4 * 0.0625


def test_clusters_come_and_go_while_the_daemon_runs():
    d = Daemon(IdleDeliverer(), idle_delivery_wait=0.01)
    runs = {"late": 0}
    d.add_routine(lambda: None, 0.05, "compact")
    t = threading.Thread(target=d.run)
    t.start()

    def late():
        runs["late"] += 1

    d.add_routine(late, 0.05, "slurm-window", cluster="late")  # listed from now on
    wait_until(lambda: runs["late"] >= 3)
    d.remove_cluster("late")  # deleted from slurmdbd
    wait_until(lambda: not any(th.name == "lane-late" for th in threading.enumerate()))
    seen = runs["late"]
    d.run_soon("slurm-window")  # no lane, no routine of that name left: nothing runs
    assert runs["late"] == seen
    d.stop()
    t.join(10)


def test_the_gate_holds_every_clusters_lane_and_its_opening_wakes_them():
    """slurmctldFailover with slurmClusters: the daemon's one gate holds the reconcilers of
    every lane; when the control routine (main loop) opens it, each lane runs its gated
    routines at once, even those whose turn is an hour away."""
    d = Daemon(IdleDeliverer(), idle_delivery_wait=5.0)  # a lane waits long unless woken
    gate = {"open": False}
    runs = {"a": 0, "b": 0}
    checks = []
    opened = threading.Event()

    def control():
        checks.append(1)
        if opened.is_set():
            gate["open"] = True

    def count(name):
        def fn():
            runs[name] += 1
        return fn

    d.gate = lambda: gate["open"]
    d.add_routine(control, 0.05, "control")
    d.add_routine(count("a"), 3600, "slurm-window", cluster="a", gated=True)
    d.add_routine(count("b"), 3600, "slurm-window", cluster="b", gated=True)
    t = threading.Thread(target=d.run)
    t.start()
    wait_until(lambda: len(checks) >= 3)
    assert runs == {"a": 0, "b": 0}  # standing by
    opened.set()
    # well within the lanes' 5 s wait: they were woken
    wait_until(lambda: runs == {"a": 1, "b": 1}, timeout=3.0)  # caught up at once
    d.stop()
    t.join(10)
    assert not t.is_alive()


def test_pid_lock(tmp_path):
    pid = tmp_path / "run" / "daemon.pid"
    pid.parent.mkdir()
    pid.write_text("999999\n")  # stale PID file from a crash: no obstacle
    lock = PidLock(pid)
    lock.acquire()
    assert lock.holder() == os.getpid()
    code = (f"from ccadapter.runtime.pidlock import PidLock\nPidLock({str(pid)!r}).acquire()")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=False, timeout=60)
    assert other.returncode != 0
    assert f"PID {os.getpid()}" in other.stderr and AlreadyRunning.__name__ in other.stderr
    lock.release()
    assert not pid.exists()
    assert PidLock(pid).lock_owners() == []


def test_last_run_is_a_file_mtime(tmp_path):
    lr = LastRun(tmp_path / "lib" / "lastrun")
    assert lr.get() is None
    lr.set(1_700_000_000.0)
    assert lr.get() == 1_700_000_000.0
    assert os.stat(tmp_path / "lib" / "lastrun").st_mtime == 1_700_000_000.0


def job(state="COMPLETED", start=100, end=200, hosts=("n1",), user="u"):
    return Job(job_id=7, cluster="c", partition="p", account="a", user=user, group="g",
               name="n", state=state, submit_time=90, start_time=start, end_time=end,
               time_limit=600, num_nodes=len(hosts), num_hwthreads=1, num_acc=0,
               shared=Shared.MULTI_USER, resources=tuple(Resource(h) for h in hosts))


def test_lifecycle():
    import re

    assert [e.kind for e in events_for(job())] == ["start", "stop"]
    assert [e.kind for e in events_for(job("RUNNING", end=0))] == ["start"]
    assert [e.kind for e in events_for(job("COMPLETING", end=0))] == ["start"]
    assert events_for(job("CANCELLED", start=0, hosts=())) == []  # never started
    assert events_for(job("PENDING", start=0, end=0, hosts=())) == []
    ignore = re.compile(r"^login")
    assert events_for(job(hosts=("login1", "login2")), ignore) == []
    assert len(events_for(job(hosts=("login1", "n1")), ignore)) == 2  # not all hosts match
    stop = events_for(job("TIMEOUT"))[1].payload["stop"]
    assert stop == {"jobId": 7, "cluster": "c", "startTime": 100, "stopTime": 200,
                    "jobState": "timeout"}


def test_gated_routines_wait_for_the_gate_and_all_run_when_it_opens():
    d, t = paced()
    runs = {"control": 0, "window": 0, "cc": 0, "compact": 0}
    gate = {"open": False}

    def make(name):
        def fn():
            runs[name] += 1
            if name == "control" and runs["control"] == 3:
                gate["open"] = True  # the third check finds this host in control
            return {}
        return fn

    d.gate = lambda: gate["open"]
    d.add_routine(make("control"), 0.05, "control")
    d.add_routine(make("window"), 0.05, "window", gated=True)
    d.add_routine(make("cc"), 3600, "cc", gated=True)
    d.add_routine(make("compact"), 3600, "compact")
    d.run_due()
    assert runs == {"control": 1, "window": 0, "cc": 0, "compact": 1}
    t.now += 0.06
    d.run_due()
    assert runs == {"control": 2, "window": 0, "cc": 0, "compact": 1}
    t.now += 0.06
    d.run_due()  # opens in this pass: the gated routines run in the same pass, all of them
    assert runs == {"control": 3, "window": 1, "cc": 1, "compact": 1}
    gate["open"] = False
    t.now += 0.06
    d.run_due()
    assert runs["window"] == 1
    gate["open"] = True
    d.run_due()  # open again: even the 3600 s routine runs at once (a takeover's catch-up)
    assert runs["cc"] == 2 and runs["window"] == 2


def test_run_soon_wakes_the_loop_for_that_routine():
    d, t = paced()
    calls, ticks = [], []

    def tick():  # a hook message for a standby daemon, in the second second
        ticks.append(t.now)
        if len(ticks) == 2:
            d.run_soon("control")

    d.add_routine(lambda: calls.append(t.now), 3600, "control")
    d.add_routine(tick, 1, "tick")
    d.run(max_cycles=3)
    assert calls == [0.0, 1.0]  # again at once, not an hour later


def test_a_signal_only_sets_a_flag_even_while_the_main_thread_holds_the_daemons_lock():
    """Issue 29: the SIGTERM handler called Daemon.stop(), which takes the daemon's lock; a
    handler runs in the main thread, so a signal that came while that thread held the lock
    (the gate's check, a lane starting) left it waiting for itself for ever. Now the handler
    stores a flag, which the main loop reads within STOP_POLL."""
    code = textwrap.dedent("""
        import os, signal, sys, threading
        from ccadapter.daemon.loop import Daemon

        class Idle:
            queue = None
            def run_once(self, stopping=lambda: False):
                from ccadapter.daemon.deliverer import DeliveryStats
                return DeliveryStats()

        daemon = Daemon(Idle(), idle_delivery_wait=0.1)
        daemon.stop_on_signals()
        with daemon._lock:  # as the main loop does, when the signal comes
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # a few bytecodes: the handler runs here
        runner = threading.Thread(target=daemon.run)
        runner.start()
        runner.join(10)
        print("stopped" if not runner.is_alive() else "running", flush=True)
        os._exit(0)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, check=False)
    assert res.stdout.strip() == "stopped", res.stderr


def test_the_default_level_gets_a_summary_not_a_line_per_cycle_or_event(caplog):
    """Issue 29: at the daemon's default level (info) the journal had a line per delivered
    event and per cycle; now a line every summary_every seconds says what happened."""
    import logging

    from ccadapter.daemon.loop import Activity

    class Busy:
        queue = None

        def run_once(self, stopping=lambda: False):
            return DeliveryStats(delivered=3)

    daemon = Daemon(Busy(), idle_delivery_wait=0.01)
    daemon.summary_every = 0.3
    daemon.add_routine(lambda: {"runs": 1}, 0.05, "slurm-window")
    daemon.add_routine(lambda: 1 / 0, 0.05, "nodestate")
    caplog.set_level(logging.INFO)
    threading.Timer(1.0, daemon.stop).start()
    daemon.run()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert lines and all(ln.startswith("in the last ") for ln in lines), lines
    assert "event(s) delivered" in lines[0] and "failed: nodestate" in lines[0]
    assert not [r for r in caplog.records if "slurm-window: {" in r.getMessage()
                and r.levelno >= logging.INFO]
    assert Activity().line(600) == ("in the last 10 min: 0 event(s) delivered, 0 rejected, 0 "
                                    "left for a later try; 0 cycles, failed: none")


def test_log_levels_of_some_loggers_apart():
    from click.testing import CliRunner

    from ccadapter.cli import main

    bad = CliRunner().invoke(main, ["--log-level", "chatty", "status"])
    assert bad.exit_code == 2 and "'chatty' is not LEVEL or LOGGER=LEVEL" in bad.output
    bad = CliRunner().invoke(main, ["--log-level", "ccadapter.daemon=debug", "status"])
    assert bad.exit_code == 2 and "the first part must be the level of everything" in bad.output


@pytest.mark.timeout(120)
def test_sigterm_during_a_long_catch_up_stops_within_seconds_losing_nothing(tmp_path):
    """Issue 35, item 10: SIGTERM was seen only when the routine in flight ended; during a
    catch-up of days that is minutes, and systemd kills the daemon 60 s after its SIGTERM.
    Here a catch-up of 24 one-hour slices whose every Slurm command takes 0.3 s (some 20 s
    in all) gets SIGTERM after 2 s: the daemon is out within a few seconds, lastRun at the
    end of a slice whose events are all stored, and the next start finishes the window."""
    import signal

    from ccadapter.outbox import Outbox
    from ccadapter.reconcilers.slurm_window import SLICE, SlurmWindow, WindowSettings
    from ccadapter.runtime.stopflag import StopFlag
    from ccadapter.slurm.collector import Collector
    from tests.conftest import collector_settings, fixture_json, fixture_text
    from tests.fakeslurm import RecordedSlurm

    meta = fixture_json("24.11", "testbed/workload.json")
    now = meta["since"] + 300

    class Slow(RecordedSlurm):
        def run(self, argv, **kw):
            time.sleep(0.3)
            return super().run(argv, **kw)

    slurm = Slow("24.11", fixture_json("24.11", "testbed/sacct-window.json"),
                 fixture_text("24.11", "testbed/scontrol-d-final.txt"), clock=lambda: now)
    collector = Collector(slurm, collector_settings(slurmFetchJobScripts=False),
                          clock=lambda: now)
    box = Outbox(tmp_path / "o.sqlite", clock=lambda: now)
    last = LastRun(tmp_path / "lastrun")
    last.set(now - 24 * SLICE)
    flag = StopFlag()
    window = SlurmWindow(collector, box, last, WindowSettings("cluster24"), lambda: now,
                         stopping=flag)
    daemon = Daemon(IdleDeliverer(), idle_delivery_wait=0.05, stop_flag=flag)
    daemon.add_routine(window.run_once, 60, "slurm-window")
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    daemon.stop_on_signals()
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        began = time.monotonic()
        daemon.run()
        took = time.monotonic() - began
    finally:
        timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    stopped_at = last.get()
    assert took < 5, took
    assert now - 24 * SLICE < stopped_at < now  # moved, slice by slice, and not to the end
    first = now - 24 * SLICE - 120  # lastRun - slurmWindowOverlap
    assert (stopped_at - first) % SLICE == 0  # the end of a slice
    rerun = SlurmWindow(collector, box, last, WindowSettings("cluster24"), lambda: now)
    rerun.run_once()  # the next start
    assert last.get() == now
    box.close()
