"""The fast path over slurmctld's recorded answers and a real outbox."""

import json
import threading
import time
from collections import Counter
from zoneinfo import ZoneInfo

import pytest

from ccadapter.errors import OutboxError, TransientSlurmError
from ccadapter.outbox import Outbox, admin
from ccadapter.prep.fastpath import FastPath
from ccadapter.prep.messages import HookEvent, HookMessage
from ccadapter.prep.peers import Peer
from ccadapter.prep.shares import Shares, ShareSettings
from ccadapter.retry import RetryPolicy
from ccadapter.slurm.collector import Collector
from ccadapter.slurm.formats.records import ParseContext, SlurmVersion
from tests.conftest import collector_settings, fixture_json, fixture_text
from tests.fakeslurm import RecordedSlurm


class Controller:
    """slurmctld's recorded text, switched from busy to final by a test."""

    def __init__(self, slurm):
        self.slurm = slurm

    def __setitem__(self, key, text):
        self.slurm.controller = text


@pytest.fixture
def env(tmp_path):
    busy = fixture_text("24.11", "testbed/scontrol-d-busy.txt")
    final = fixture_text("24.11", "testbed/scontrol-d-final.txt")
    runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"), busy,
                           controller_script=lambda job_id: "#!/bin/sh\nsleep 1\n")
    collector = Collector(runner, collector_settings(), tz=ZoneInfo("UTC"))
    box = Outbox(tmp_path / "o.sqlite")
    woken = threading.Event()
    counts = Counter()
    fast = FastPath(collector, box, woken.set, retry=RetryPolicy(0.05, 0.05, 3),
                    on_received=lambda: counts.update(["received"]),
                    on_drop=lambda reason, _: counts.update([reason]),
                    on_unknown=lambda ids: counts.update(["unknown"] * len(ids))).start()
    fast.counts = counts  # what the daemon's metrics hear
    yield fast, box, runner, Controller(runner), woken, final
    fast.stop()
    box.close()


def wait(pred, timeout=5):
    until = time.time() + timeout
    while not pred() and time.time() < until:
        time.sleep(0.01)
    return pred()


def test_start_is_enqueued_from_slurmctld_alone(env):
    fast, box, runner, _, woken, _ = env
    meta = fixture_json("24.11", "testbed/workload.json")
    gpu = meta["ids"]["gpujob"][0]
    fast.submit(HookMessage(gpu, HookEvent.START, None))
    assert wait(woken.is_set)
    (event,) = box.queue.due()
    body = event.payload
    assert body["jobId"] == gpu and body["cluster"] == "cluster24"
    assert body["resources"][0]["accelerators"] and body["resources"][0]["hwthreads"]
    assert body["metaData"]["jobScript"].startswith("#!/bin/sh")
    assert runner.calls["sacct"] == 0  # no slurmdbd on the fast path


def test_a_start_takes_its_script_from_slurmdbd_where_it_keeps_scripts(env):
    """Issue 47: with ``AccountingStoreFlags=job_script`` (23.02 on: sacct's JSON holds
    it) the script is slurmdbd's, asked beside slurmctld's ``show job``: one slurmctld RPC
    a start. A job slurmdbd has no script of yet is asked of slurmctld."""
    fast, box, runner, _, woken, _ = env
    ids = fixture_json("24.11", "testbed/workload.json")["ids"]
    gpu, other = ids["gpujob"][0], ids["timeout"][0]
    runner.config = "AccountingStoreFlags    = job_script\n"
    fast.collector.cluster_name()  # the config as the daemon reads it at its start
    fast.collector._seen(SlurmVersion(24, 11, 5))  # as the daemon's first sacct answer says
    runner.scripts = {gpu: "#!/bin/sh\n# from slurmdbd\n"}
    fast.submit(HookMessage(gpu, HookEvent.START, None))
    assert wait(woken.is_set)
    assert stored(box, "start")["metaData"]["jobScript"] == "#!/bin/sh\n# from slurmdbd\n"
    assert [commands(t) for t in runner.stdins] == [[f"show job {gpu}"]]
    assert runner.calls["sacct"] == 1
    assert fast.collector.slurmctld._scripts_of([other], None, ParseContext("24.11", "s"))[1] == {
        other: "#!/bin/sh\nsleep 1\n"}  # none in slurmdbd: slurmctld's
    runner.config = ""
    fast.collector.cluster_name()
    assert fast.collector.stored_scripts([gpu]) == {}  # slurmdbd keeps none: not asked


def test_end_retried_until_slurmctld_has_it(env):
    fast, box, runner, state, _, final = env
    meta = fixture_json("24.11", "testbed/workload.json")
    job = meta["ids"]["timeout"][0]  # pending in the busy snapshot, TIMEOUT in the final one
    fast.submit(HookMessage(job, HookEvent.END, None))
    assert wait(lambda: len(runner.stdins) >= 2)  # asked again while it is not ended
    state["text"] = final
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)


def stored(box, kind):
    """The body the outbox would send for the one event of ``kind`` (due or not)."""
    from ccadapter.outbox.queue import PAYLOAD

    with box.store.read() as db:
        (payload,) = db.execute(f"SELECT {PAYLOAD} FROM events e WHERE kind = ?",
                                (kind,)).fetchone()
    return json.loads(payload)


def test_an_end_whose_start_is_stored_is_read_from_slurmdbd_alone(env):
    """Issue 47: the stored start carries the allocation and the script into the stop, and
    slurmdbd has the end: the end costs slurmctld nothing."""
    fast, box, runner, _, _, _ = env
    job = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]  # completed in sacct
    fast.submit(HookMessage(job, HookEvent.START, None))
    assert wait(lambda: len(box.queue.due()) == 1)
    asked, dbd = len(runner.stdins), runner.calls["sacct"]
    fast.submit(HookMessage(job, HookEvent.END, None))
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)
    assert len(runner.stdins) == asked and runner.calls["sacct"] > dbd
    assert stored(box, "stop")["start"]["metaData"]["jobScript"] == "#!/bin/sh\nsleep 1\n"
    assert stored(box, "start")["resources"][0]["hwthreads"]  # slurmctld's start kept


def test_an_end_slurmdbd_does_not_show_ended_is_asked_of_it_again(env):
    fast, box, runner, _, _, _ = env
    job = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]
    fast.submit(HookMessage(job, HookEvent.START, None))
    assert wait(lambda: len(box.queue.due()) == 1)
    ended = runner.doc
    runner.doc = runner.listed = {**ended, "jobs": [
        {**r, "state": {**r["state"], "current": ["RUNNING"]}, "time": {**r["time"], "end": 0}}
        if r["job_id"] == job else r for r in ended["jobs"]]}
    asked, dbd = len(runner.stdins), runner.calls["sacct"]
    fast.submit(HookMessage(job, HookEvent.END, None))
    assert wait(lambda: runner.calls["sacct"] >= dbd + 2)  # slurmdbd lags: asked again
    runner.doc = runner.listed = ended
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)
    assert len(runner.stdins) == asked


def test_an_end_is_asked_of_slurmctld_while_slurmdbd_is_down(env):
    fast, box, runner, state, _, final = env
    job = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]
    fast.submit(HookMessage(job, HookEvent.START, None))
    assert wait(lambda: len(box.queue.due()) == 1)
    asked = len(runner.stdins)
    runner.sacct_down, state["text"] = True, final
    fast.submit(HookMessage(job, HookEvent.END, None))
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)
    assert [commands(t) for t in runner.stdins[asked:]] == [[f"show job {job}"]]


def test_an_end_is_asked_without_its_script_when_the_outbox_holds_the_start(env):
    """Where slurmdbd is not asked (unreachable): the stored start carries the script into
    the stop, and the end costs slurmctld one request, not two."""
    fast, box, runner, state, _, final = env
    fast.ends_from_slurmdbd = False
    job = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]  # runs, then completed
    fast.submit(HookMessage(job, HookEvent.START, None))
    assert wait(lambda: len(box.queue.due()) == 1)
    state["text"] = final
    fast.submit(HookMessage(job, HookEvent.END, None))
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)
    *start_asks, end_ask = runner.stdins  # the start's job and script, asked at once
    assert sorted(commands(text) for text in start_asks) == [[f"show job {job}"],
                                                             [f"write batch_script {job} -"]]
    assert commands(end_ask) == [f"show job {job}"]
    assert stored(box, "stop")["start"]["metaData"]["jobScript"] == "#!/bin/sh\nsleep 1\n"


def test_an_end_whose_start_the_outbox_lacks_is_asked_again_with_its_script(env):
    fast, box, runner, state, _, final = env
    job = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]  # runs, then completed
    state["text"] = final
    fast.submit(HookMessage(job, HookEvent.END, None))  # its start's message was lost
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)
    first, again = runner.stdins
    assert first.splitlines()[0] == f"show job {job}" and "batch_script" not in first
    assert f"write batch_script {job} -" in again
    assert stored(box, "start")["metaData"]["jobScript"] == "#!/bin/sh\nsleep 1\n"
    assert stored(box, "stop")["start"]["metaData"]["jobScript"] == "#!/bin/sh\nsleep 1\n"


def commands(stdin: str) -> list[str]:
    """The questions of one scontrol stdin, without the markers between them."""
    return [line for line in stdin.splitlines() if not line.startswith("show hostnames")]


def test_burst_is_coalesced(env):
    fast, _, runner, _, _, _ = env
    for job_id in range(1, 1001):
        fast.submit(HookMessage(job_id, HookEvent.START, None))
    assert wait(lambda: fast._pending == {} and runner.calls["scontrol"] >= 1)
    time.sleep(0.2)
    questions = [a for a in runner.argvs if a[0] == "scontrol" and "config" not in a]
    # a handful of questions for 1,000 announcements (here one dump: RouteCosts.first_dump)
    assert len(questions) <= 10
    # none dropped; the ids the recording does not hold are unknown to slurmctld, each once
    assert fast.counts["received"] == 1000 and set(fast.counts) == {"received", "unknown"}
    assert fast.counts["unknown"] == 1000 - len(known_ids(runner))


def known_ids(runner) -> set[int]:
    """The job ids of the recorded slurmctld's answer."""
    return {int(line.split()[0][6:]) for line in runner.controller.splitlines()
            if line.startswith("JobId=")}


def test_outbox_full_leaves_the_job_to_the_poll_and_keeps_serving(env, caplog, monkeypatch):
    fast, box, _, _, _, _ = env
    meta = fixture_json("24.11", "testbed/workload.json")
    gpu = meta["ids"]["gpujob"][0]
    real = box.enqueue

    def full(events):  # what Outbox raises when SQLite finds the disk full
        raise OutboxError(str(box.path), "database or disk is full")
    monkeypatch.setattr(box, "enqueue", full)
    fast.submit(HookMessage(gpu, HookEvent.START, None))
    assert wait(lambda: "left to the poll" in caplog.text)
    assert "disk is full" in caplog.text and box.queue.due() == []
    monkeypatch.setattr(box, "enqueue", real)
    fast.submit(HookMessage(gpu, HookEvent.START, None))  # the fast path still runs
    assert wait(lambda: box.queue.due()), caplog.text
    assert [e.job_id for e in box.queue.due()] == [gpu]


@pytest.fixture
def timed(tmp_path):
    """A FastPath over the recorded 24.11 busy snapshot, its timings given by the test;
    with the runner (its ``stdins``: one per scontrol process) and two job ids."""
    busy = fixture_text("24.11", "testbed/scontrol-d-busy.txt")
    runner = RecordedSlurm("24.11", fixture_json("24.11", "testbed/sacct-window.json"), busy)
    collector = Collector(runner, collector_settings(), tz=ZoneInfo("UTC"))
    box = Outbox(tmp_path / "o.sqlite")
    started = []

    def make(**timings) -> FastPath:
        started.append(FastPath(collector, box, lambda: None, **timings).start())
        return started[-1]
    meta = fixture_json("24.11", "testbed/workload.json")
    yield make, runner, meta["ids"]["gpujob"][0], meta["ids"]["timeout"][0]
    for fast in started:
        fast.stop()
    box.close()


def test_a_start_waits_for_slurmctld_to_leave_configuring_and_batches_with_ends(timed):
    """PrologSlurmctld announces a start while slurmctld still configures the job: where its
    nodes may boot (this recorded config says nothing of it), asked at once it would answer
    CONFIGURING and cost a second question."""
    make, runner, gpu, ended = timed
    fast = make(coalesce=0.01, start_settle=0.4)
    fast.submit(HookMessage(gpu, HookEvent.START, None))
    time.sleep(0.2)
    assert runner.stdins == []  # still settling
    fast.submit(HookMessage(ended, HookEvent.END, None))  # due at once, alone
    assert wait(lambda: runner.stdins)
    assert f"job {ended}" in runner.stdins[0] and f"job {gpu}" not in runner.stdins[0]
    assert wait(lambda: any(f"job {gpu}" in text for text in runner.stdins))
    asked = [text for text in runner.stdins if f"job {gpu}" in text]
    assert len(asked) == 1  # once, after its settle time, with its script


def test_an_end_is_asked_with_the_next_start_in_a_lane_of_its_own(timed):
    """A churn costs the fast path one wake-up per start: ends wait for company (up to
    ``coalesce``) and are asked when the next start is, of a free scontrol (nobody waits
    for an end, and it does not hold up the start)."""
    make, runner, gpu, other = timed
    fast = make(coalesce=5.0, start_settle=0.05)
    fast.submit(HookMessage(other, HookEvent.END, None))
    time.sleep(0.2)
    assert runner.stdins == []  # an end alone waits
    fast.submit(HookMessage(gpu, HookEvent.START, None))
    assert wait(lambda: len(runner.stdins) == 3, timeout=2)  # long before its coalesce
    assert sorted(map(commands, runner.stdins)) == [
        [f"show job {gpu}"], [f"show job {other}"], [f"write batch_script {gpu} -"]]


def shown(stdin: str) -> list[int]:
    return sorted(int(c.split()[2]) for c in commands(stdin) if c.startswith("show job"))


def starts_asked_together(runner, seen=lambda stdin: None) -> None:
    """Each question about starts (any ``show job`` but the end 335's) waits until three
    are asked, which questions asked in turn never are; ``seen(stdin)`` is told of every
    question as it is asked."""
    together = threading.Barrier(3, timeout=5)
    ask = runner.ask

    def asking(argv, stdin, *args, **kwargs):
        if "show job" in stdin and "show job 335" not in stdin:  # a part of starts
            together.wait()
        seen(stdin)
        return ask(argv, stdin, *args, **kwargs)
    runner.ask = asking


def test_a_burst_is_asked_in_parts_at_once_and_its_ends_in_the_next_free_lane(env):
    """slurmctld answers one scontrol's questions in turn but several scontrol at once: a
    burst's starts are asked in up to ``slots`` parts at the same time (here each part waits
    for the other two to be asked, which it could not do if they were asked in turn); the
    ends, for which no slot was left, once a slot is free and they are due."""
    fast, box, runner, _, _, _ = env
    stored_when_asked = {}

    def seen(stdin):
        stored_when_asked[stdin] = admin.stats(box.store)["counts"].get("start:pending", 0)
    starts_asked_together(runner, seen)
    with fast._cond:  # one batch: the fast path takes none until all are in
        for job_id in (339, 331, 330, 329, 328):  # completed, running, ...: all started
            fast.submit(HookMessage(job_id, HookEvent.START, None))
        fast.submit(HookMessage(335, HookEvent.END, None))  # cancelled while pending
    assert wait(lambda: len(runner.stdins) == 7 and not fast._pending)
    jobs_asked = [text for text in runner.stdins if "show job" in text]
    assert sorted(map(shown, jobs_asked[:3])) == [[328, 331], [329, 339], [330]]
    assert shown(jobs_asked[3]) == [335] and stored_when_asked[jobs_asked[3]] == 5
    scripts = sorted(c for text in runner.stdins for c in commands(text) if "batch_script" in c)
    assert scripts == [f"write batch_script {i} -" for i in (328, 329, 330, 331, 339)]
    assert wait(lambda: len(box.queue.due()) == 5)  # 339's end is not final in this snapshot


def test_a_start_is_asked_at_once_in_a_free_lane_while_another_part_is_asked(env):
    """A start announced while a part is being asked does not wait for its answer: it goes
    to a free slot, and is stored first when that part is slow."""
    fast, box, runner, _, _, _ = env
    release = threading.Event()
    ask = runner.ask

    def slow_for_331(argv, stdin, *args, **kwargs):
        if "show job 331" in stdin:
            release.wait(5)
        return ask(argv, stdin, *args, **kwargs)
    runner.ask = slow_for_331
    fast.submit(HookMessage(331, HookEvent.START, None))
    assert wait(lambda: fast._asked == {331})
    fast.submit(HookMessage(328, HookEvent.START, None))
    assert wait(lambda: [e.job_id for e in box.queue.due()] == [328])
    release.set()
    assert wait(lambda: sorted(e.job_id for e in box.queue.due()) == [328, 331])


def test_a_job_is_not_asked_in_two_lanes_at_once(env):
    """An end announced while its start is being asked waits for that answer: asked
    beside it, it could reach the outbox before its start."""
    fast, box, runner, state, _, final = env
    fast.ends_from_slurmdbd = False  # ends asked of slurmctld, as where slurmdbd is down
    job = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]  # runs, then completed
    release = threading.Event()
    questions = []
    ask = runner.ask

    def slow_start(argv, stdin, *args, **kwargs):
        questions.append(stdin)
        if commands(stdin) != [f"show job {job}"] or release.is_set():
            return ask(argv, stdin, *args, **kwargs)
        release.wait(5)
        done = ask(argv, stdin, *args, **kwargs)
        state["text"] = final  # it ends once its start is read
        return done
    runner.ask = slow_start
    fast.coalesce = 0.0
    fast.submit(HookMessage(job, HookEvent.START, None))
    assert wait(lambda: fast._asked == {job})
    fast.submit(HookMessage(job, HookEvent.END, None))
    time.sleep(0.3)
    assert sum(f"show job {job}" in text for text in questions) == 1  # the start's alone
    release.set()
    assert wait(lambda: admin.stats(box.store)["counts"].get("stop:pending") == 1)
    assert sum(f"show job {job}" in text for text in questions) == 2
    assert stored(box, "stop")["start"]["metaData"]["jobScript"] == "#!/bin/sh\nsleep 1\n"


def test_a_het_job_whose_components_fall_into_two_parts_is_stored_once(env):
    fast, box, runner, _, _, _ = env
    leader, component = fixture_json("24.11", "testbed/workload.json")["ids"]["hetjob"]
    with fast._cond:
        for job_id in (331, leader, component):
            fast.submit(HookMessage(job_id, HookEvent.START, None))
    # three parts, and the component's own part reads its leader too: the het job is
    # built twice, stored once
    assert wait(lambda: sorted(e.job_id for e in box.queue.due()) == [331, leader]
                and fast._free == fast.slots)
    time.sleep(0.2)
    assert sum(f"show job {leader}\n" in text for text in runner.stdins) == 2
    assert sorted(e.job_id for e in box.queue.due()) == [331, leader]


def test_a_burst_cheaper_to_dump_is_asked_in_one_part(env):
    """Parts would keep a 600-task array under the 500 jobs a first dump needs
    (RouteCosts.first_dump): a burst the dump route suits is read in one dump."""
    fast, box, runner, _, _, _ = env
    with fast._cond:
        for job_id in (*range(10_000, 10_599), 331):  # 599 unknown to slurmctld, and one
            fast.submit(HookMessage(job_id, HookEvent.START, None))
    assert wait(lambda: [e.job_id for e in box.queue.due()] == [331])
    dumps = [a for a in runner.argvs if a[-2:] == ["show", "job"]]
    assert len(dumps) == 1 and all("show job" not in text for text in runner.stdins)


def burst_with_a_failing_part(fast, runner, error: Exception) -> None:
    """Five starts, asked in parts [328, 331], [329, 339], [330]; asking about 330 raises
    ``error``."""
    ask = runner.ask

    def failing_one(argv, stdin, *args, **kwargs):
        if "show job 330" in stdin:
            raise error
        return ask(argv, stdin, *args, **kwargs)
    runner.ask = failing_one
    with fast._cond:
        for job_id in (328, 329, 330, 331, 339):
            fast.submit(HookMessage(job_id, HookEvent.START, None))


def test_a_part_that_fails_leaves_its_jobs_to_the_poll_and_the_others_are_stored(env, caplog):
    fast, box, runner, _, _, _ = env
    burst_with_a_failing_part(fast, runner,
                              TransientSlurmError(["scontrol"], "no answer within 60 s"))
    assert wait(lambda: "left to the poll" in caplog.text)
    assert wait(lambda: len(box.queue.due()) == 4)
    assert "1 job(s) left to the poll" in caplog.text
    assert sorted(e.job_id for e in box.queue.due() if e.kind == "start") == [328, 329, 331,
                                                                              339]


def test_a_bug_in_one_part_leaves_only_its_jobs_to_the_poll(env, caplog):
    fast, box, runner, _, _, _ = env
    burst_with_a_failing_part(fast, runner, RuntimeError("a bug"))
    assert wait(lambda: len(box.queue.due()) == 4)
    assert wait(lambda: "left to the poll" in caplog.text)
    assert "fast path: 1 job(s) left to the poll" in caplog.text and "a bug" in caplog.text
    assert "5 job(s)" not in caplog.text


def test_slurmctld_unreachable_costs_the_parts_one_wait_at_the_same_time(env, caplog):
    """The parts' questions (and their scripts') wait at the same time, so a burst costs
    one timeout, not one per part; each part leaves its jobs to the poll, the ends too."""
    fast, box, runner, _, _, _ = env
    runner.controller_down = True
    starts_asked_together(runner)
    with fast._cond:
        for job_id in (328, 329, 330, 331):
            fast.submit(HookMessage(job_id, HookEvent.START, None))
        fast.submit(HookMessage(335, HookEvent.END, None))
    assert wait(lambda: caplog.text.count("left to the poll") == 4)
    assert caplog.text.count("2 job(s) left to the poll") == 1
    assert caplog.text.count("1 job(s) left to the poll") == 3
    assert box.queue.due() == [] and not fast._pending


def test_a_job_slurmctld_does_not_show_is_asked_once(env):
    """A hook socket that anyone reaches may name ids slurmctld never heard of: each is
    asked once, counted, and a message naming it again is dropped unasked."""
    fast, _, runner, _, woken, _ = env
    fast.ends_from_slurmdbd = False  # the real job's end is asked of slurmctld
    gpu = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]
    fast.submit(HookMessage(gpu, HookEvent.START, None))  # slurmctld shows its ids
    assert wait(woken.is_set)
    woken.clear()
    someone = Peer("uid 1000")
    fast.submit(HookMessage(7, HookEvent.START, None, peer=someone))
    assert wait(lambda: fast.counts["unknown"] == 1)
    asked = len(runner.stdins)
    for _ in range(5):
        fast.submit(HookMessage(7, HookEvent.END, None, peer=someone))
    assert wait(lambda: idle(fast))
    time.sleep(0.3)
    assert len(runner.stdins) == asked and fast.counts["unknown_job"] == 5
    fast.submit(HookMessage(gpu, HookEvent.END, None))  # a real job is still asked
    assert wait(lambda: len(runner.stdins) > asked)


def test_a_stop_waits_for_the_questions_in_flight_before_the_outbox_closes(env, monkeypatch):
    """Issue 29: stop() left the slots running (shutdown without waiting), so a part asked
    at SIGTERM stored its answer after the daemon had closed the outbox, or never."""
    fast, box, _, _, _, _ = env
    asked = threading.Event()
    real = fast.collector.controller_jobs

    def slow(*args, **kwargs):
        asked.set()
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(fast.collector, "controller_jobs", slow)
    gpu = fixture_json("24.11", "testbed/workload.json")["ids"]["gpujob"][0]
    fast.submit(HookMessage(gpu, HookEvent.START, None))
    assert asked.wait(5)
    fast.stop()
    assert [e.job_id for e in box.queue.due()] == [gpu]  # stored before stop() returned


def questions(runner) -> int:
    """What slurmctld was asked: one RPC for each job shown and each script written."""
    return sum(1 for stdin in runner.stdins for line in stdin.splitlines()
               if line.split()[:2] in (["show", "job"], ["write", "batch_script"]))


def idle(fast) -> bool:
    with fast._cond:
        return fast._lane.idle() and not fast._pending and not fast._later \
            and fast._free == fast.slots


def test_a_sender_replaying_real_ids_costs_slurmctld_its_share_only(env):
    """Issue 36, item 1: a message naming a real job was always asked, an end for a running
    job up to slurmMaxRetries times, so replaying the ids squeue prints loaded slurmctld
    without bound. Now a job the outbox holds in the state announced costs nothing, every
    other question (retries included) is drawn from its sender's share, all senders but
    slurmctld's own share one total, and slurmctld's own messages keep their reserve."""
    fast, _, runner, _, woken, _ = env
    clock = [0.0]
    fast.admission.shares = Shares(ShareSettings(peer_rate=0, peer_burst=10, total_rate=0,
                                                 total_burst=15), lambda: clock[0])
    meta = fixture_json("24.11", "testbed/workload.json")
    ids, cluster = sorted(i for v in meta["ids"].values() for i in v), meta["cluster"]
    for job_id in ids:  # slurmctld's hook: every start asked, not charged to anyone else
        fast.submit(HookMessage(job_id, HookEvent.START, None, cluster))
    assert wait(lambda: woken.is_set() and idle(fast))
    before = questions(runner)
    for attacker in ("uid 1000", "uid 1001"):
        for _ in range(20):
            for job_id in ids:
                for event in (HookEvent.START, HookEvent.END):
                    fast.submit(HookMessage(job_id, event, None, cluster, Peer(attacker)))
            assert wait(lambda: idle(fast))
        if attacker == "uid 1000":
            assert questions(runner) - before <= 10  # its own share
    assert questions(runner) - before <= 15  # both together: the total share
    assert fast.counts["known"] > 0 and fast.counts["share"] > 0
    asked = questions(runner)
    fast.submit(HookMessage(ids[0], HookEvent.END, None, cluster))  # slurmctld's: asked
    assert wait(lambda: questions(runner) > asked and idle(fast))
