"""The runner drives real subprocesses: a small shell script stands in for a Slurm client."""

import os
import stat
import time

import pytest

from ccadapter.errors import SlurmCommandError, TransientSlurmError
from ccadapter.retry import RetryPolicy
from ccadapter.slurm.runner import SlurmRunner

FAST = RetryPolicy(0.01, 0.02, 3)


@pytest.fixture
def fake_bin(tmp_path):
    def make(name, body):
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(tmp_path)

    return make


def runner_for(bindir, **kw):
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return SlurmRunner(env=env, retry=FAST, **kw)


def test_output_with_non_utf8_bytes_is_replaced(fake_bin):
    d = fake_bin("sacct", r"printf '{\042name\042: \042caf\351\042}'")
    assert runner_for(d).run(["sacct"]) == '{"name": "caf\ufffd"}'


def test_transient_failure_is_retried_then_succeeds(fake_bin, tmp_path):
    marker = tmp_path / "count"
    d = fake_bin("squeue", f"""
n=$(cat {marker} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {marker}
if [ $n -lt 3 ]; then echo "squeue: error: Unable to contact slurm controller" >&2; exit 1; fi
echo ok""")
    r = runner_for(d)
    assert r.run(["squeue"]).strip() == "ok"
    assert r.calls["squeue"] == 3


def test_permanent_failure_is_not_retried_and_keeps_stderr(fake_bin):
    d = fake_bin("sacct", 'echo "sacct: unrecognized option --bogus" >&2; exit 1')
    r = runner_for(d)
    with pytest.raises(SlurmCommandError) as err:
        r.run(["sacct", "--bogus"])
    assert not isinstance(err.value, TransientSlurmError)
    assert "unrecognized option" in str(err.value) and r.calls["sacct"] == 1


def test_timeout_kills_and_reports(fake_bin):
    d = fake_bin("scontrol", "sleep 30")
    r = runner_for(d, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TransientSlurmError, match=r"no answer within 0\.3 s"):
        r.run(["scontrol", "show", "job"], retry=False)
    assert time.monotonic() - started < 5


def test_prefix_is_prepended(fake_bin):
    d = fake_bin("wrap", 'echo "$@"')
    r = SlurmRunner(prefix=[f"{d}/wrap", "inner"], retry=FAST)
    assert r.run(["sinfo", "--json"]).strip() == "inner sinfo --json"


def test_missing_program():
    with pytest.raises(SlurmCommandError, match="cannot run"):
        SlurmRunner(prefix=["/nonexistent/chroot"], retry=FAST).run(["sacct"])


def test_multi_line_stderr_becomes_one_log_line():
    from ccadapter.errors import SlurmCommandError

    err = SlurmCommandError(["sacct", "--json"], "exit code 1",
                            "sacct: error: a\n\nsacct: error: b\n")
    assert str(err) == "sacct --json: exit code 1: sacct: error: a | sacct: error: b"
    assert err.stderr.count("\n") == 3  # the raw text stays available


def test_each_thread_knows_what_its_commands_cost(fake_bin):
    """A reconciler's cycle cost: its commands' count, output bytes, CPU time and the wall
    time waited for them, kept per thread (the fast path runs commands in another thread
    at the same time)."""
    import threading

    d = fake_bin("sacct", 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.1; '
                          'echo 12345')
    r = runner_for(d)
    other = []
    t = threading.Thread(target=lambda: other.append((r.run(["sacct"]), r.tally())))
    t.start()
    t.join()
    assert r.tally().commands == 0 and other[0][1].commands == 1
    before = r.tally()
    r.run(["sacct"])
    list(r.lines(["sacct"]))
    spent = r.tally().minus(before)
    assert spent.commands == 2 and spent.bytes == 12
    assert spent.cpu > 0.005  # the shell's loop, as the kernel accounted it
    assert spent.seconds >= 0.2  # waited for: the two sleeps at least
    assert before.seconds == 0 and other[0][1].seconds >= 0.1  # the other thread's own
