"""SlurmRunner.ask and its long-lived process (ccadapter/slurm/session.py), driven against a
shell script that reads commands as scontrol does from a pipe: a prompt, the command's echo,
its answer (errors on stderr); ``die`` ends it, ``slow`` and ``hang`` sleep."""

import gc
import os
import signal
import stat
import threading
import time

import pytest

from ccadapter.errors import TransientSlurmError
from ccadapter.retry import RetryPolicy
from ccadapter.slurm.formats.scontrol import Batch, show_job
from ccadapter.slurm.runner import SlurmRunner

SCONTROL = r"""#!/bin/sh
echo $$ >> "$(dirname "$0")/pids"
while printf 'scontrol: ' && read -r line; do
  echo "$line"
  case "$line" in
    "show hostnames "*) echo "${line#show hostnames }" ;;
    "show job 404") echo "slurm_load_jobs error: Invalid job id specified" >&2 ;;
    "show job "*) printf 'JobId=%s JobName=j\n   JobState=RUNNING\n\n' "${line#show job }" ;;
    die) echo "scontrol: fatal: gone" >&2; exit 3 ;;
    slow) sleep 1 ;;
    hang) sleep 30 ;;
  esac
done
"""


@pytest.fixture
def bindir(tmp_path):
    path = tmp_path / "scontrol"
    path.write_text(SCONTROL)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def runner_for(bindir, **kw):
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return SlurmRunner(env=env, retry=RetryPolicy(0.01, 0.02, 3), **kw)


def pids(bindir) -> list[int]:
    path = bindir / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # reaped or not, a zombie is not running
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def ask(runner, *commands):
    batch = Batch.of(commands)
    done = runner.ask(["scontrol", "-d"], batch.stdin(), batch.complete)
    return done, batch.answers(done.stdout)


def test_one_process_answers_question_after_question(bindir):
    r = runner_for(bindir)
    for _ in range(3):
        done, answers = ask(r, show_job(7), show_job(404), show_job(8))
        assert done.returncode == 0
        assert answers == ["JobId=7 JobName=j\n   JobState=RUNNING\n\n", "",
                           "JobId=8 JobName=j\n   JobState=RUNNING\n\n"]
        assert done.stderr == "slurm_load_jobs error: Invalid job id specified\n"
    assert len(pids(bindir)) == 1 and alive(pids(bindir)[0])
    assert r.calls["scontrol"] == 3 and r.tally().commands == 3
    r.close()
    assert not alive(pids(bindir)[0])


def test_a_process_that_ended_while_idle_is_replaced_unnoticed(bindir):
    r = runner_for(bindir)
    ask(r, show_job(1))
    os.kill(pids(bindir)[0], signal.SIGKILL)
    time.sleep(0.2)
    done, answers = ask(r, show_job(2))
    assert (done.returncode, answers[0].split()[0]) == (0, "JobId=2")
    assert len(pids(bindir)) == 2
    r.close()


def test_a_process_that_ends_mid_answer_gives_its_exit_status_and_is_replaced(bindir):
    r = runner_for(bindir)
    done, answers = ask(r, show_job(1), "die", show_job(2))
    assert done.returncode == 3 and "fatal: gone" in done.stderr
    assert answers[0].startswith("JobId=1") and answers[2] is None
    done, answers = ask(r, show_job(3))
    assert done.returncode == 0 and answers[0].startswith("JobId=3")
    assert len(pids(bindir)) == 2
    r.close()


def test_no_answer_in_time_kills_it_and_is_transient(bindir):
    r = runner_for(bindir, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TransientSlurmError, match=r"no answer within 0\.3 s"):
        ask(r, "hang")
    assert time.monotonic() - started < 5
    assert not alive(pids(bindir)[0])
    r.timeout = 30.0  # a loaded machine may take a while to start the next one
    assert ask(r, show_job(4))[1][0].startswith("JobId=4")  # a new one answers
    r.close()


def test_a_busy_process_is_not_waited_for(bindir):
    r = runner_for(bindir)
    ask(r, show_job(1))  # the long-lived process exists
    slow = threading.Thread(target=ask, args=(r, "slow"))
    slow.start()
    time.sleep(0.2)
    started = time.monotonic()
    _, answers = ask(r, show_job(5))  # answered by a process of its own
    assert time.monotonic() - started < 0.8 and answers[0].startswith("JobId=5")
    slow.join()
    assert len(pids(bindir)) == 2
    r.close()


def test_an_old_process_is_replaced_and_ended(bindir):
    r = runner_for(bindir, session_age=0.0)
    ask(r, show_job(1))
    ask(r, show_job(2))
    first, second = pids(bindir)
    assert not alive(first) and alive(second)
    r.close()


def test_a_runner_dropped_without_close_ends_its_process(bindir):
    r = runner_for(bindir)
    ask(r, show_job(1))
    del r
    gc.collect()
    assert not alive(pids(bindir)[0])


def test_questions_at_the_same_time_get_up_to_sessions_long_lived_processes(bindir):
    """The fast path asks slurmctld about a burst in several parts at once: each part gets
    a long-lived process of its own, up to ``sessions``; one more is answered by a one-shot
    process, and later questions reuse the long-lived ones."""
    r = runner_for(bindir, sessions=2)
    asked_at_once(r, 3)
    assert len(pids(bindir)) == 3
    lasting = [p for p in pids(bindir) if alive(p)]
    assert len(lasting) == 2  # the third, one-shot, ended with its answer
    asked_at_once(r, 2)
    assert len(pids(bindir)) == 3 and all(alive(p) for p in lasting)
    r.close()
    assert not any(alive(p) for p in lasting)


def asked_at_once(runner, count: int) -> None:
    """``count`` slow questions from as many threads, all answered."""
    threads = [threading.Thread(target=ask, args=(runner, "slow")) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
