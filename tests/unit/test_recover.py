"""recover's first steps: taking the lock over a stale PID file, clearing a stale socket."""

import socket
import subprocess
import sys

import pytest

from ccadapter.ops.recover import Refused, claim, clear_socket
from ccadapter.runtime.pidlock import AlreadyRunning, PidLock


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_claim_replaces_a_stale_pid_file(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    pid_file.write_text(f"{dead_pid()}\n")
    lock = PidLock(pid_file)
    (action,) = claim(lock)
    assert "stale PID file" in action and "not alive" in action
    lock.release()
    assert not pid_file.exists()
    lock = PidLock(pid_file)
    assert claim(lock) == []  # nothing stale: nothing to say
    lock.release()


def test_claim_never_touches_a_live_pid(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file.write_text(f"{sleeper.pid}\n")  # alive, but no lock: not our daemon
        with pytest.raises(Refused, match="does not hold ccadapter's lock"):
            claim(PidLock(pid_file))
        assert pid_file.read_text() == f"{sleeper.pid}\n"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_claim_refuses_a_running_daemon(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    code = (f"from ccadapter.runtime.pidlock import PidLock\nlock = PidLock({str(pid_file)!r})\n"
            "lock.acquire()\nprint('held', flush=True)\nimport sys; sys.stdin.read()")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(Refused, match="the daemon is running"):
            claim(PidLock(pid_file))
        pid_file.unlink()  # PID file lost, lock still held: the lock decides
        with pytest.raises(AlreadyRunning):
            claim(PidLock(pid_file))
        holder.stdin.close()


def test_clear_socket(tmp_path):
    path = tmp_path / "daemon.sock"
    assert clear_socket(str(path)) == []
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # a crash leaves the file behind
    assert clear_socket(f"unix:{path}") == [f"stale socket {path} removed"]
    assert not path.exists()
    path.write_text("not a socket")
    (msg,) = clear_socket(str(path))
    assert "not a socket: left alone" in msg and path.exists()
    assert clear_socket("tcp:127.0.0.1:1") == []
    with pytest.raises(ValueError):
        clear_socket("udp:127.0.0.1:1")
