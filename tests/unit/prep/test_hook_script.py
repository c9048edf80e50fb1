"""hooks/ccadapter-hook.sh as slurmctld runs it: bash alone tells a TCP socket (no program
started, issue 47's "cheaper than a Python interpreter"), the Python hook everything else;
every way it can fail exits 0 within the hook's second and says why on stderr."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

import ccadapter.prep.hook as hook
from ccadapter.prep.messages import HookEvent
from tests.unit.prep.test_hook_and_server import Listener, free_port, python_venv, site_hook

SLURM = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "42",
         "SLURM_CLUSTER_NAME": "c1", "SLURM_JOB_NAME": 'a "quoted" name'}


def installed(tmp_path: Path, spec: str | None, venv: Path | None = None) -> Path:
    """The script as a site installs it; ``venv`` None: one with no Python at all, so that
    the message can only have come from bash."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"ccRestUrl": "http://x", "prepSockConnectPath": spec}
                              if spec is not None else {}, indent=2))
    script = tmp_path / "ccadapter-hook.sh"
    script.write_text(site_hook(venv or tmp_path / "no-venv", cfg))
    script.chmod(0o755)
    return script


def run(script: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    res = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=30,
                         check=False)  # no PATH: bash's builtins need none
    return res, time.monotonic() - t0


@pytest.mark.parametrize("form", ["tcp:127.0.0.1:{}", "tcp::{}", "TCP:127.0.0.1:{}"])
def test_a_tcp_socket_is_told_by_bash_alone(tmp_path, form):
    port = free_port()
    lst = Listener([f"tcp:127.0.0.1:{port}"])
    try:
        res, _ = run(installed(tmp_path, form.format(port)),
                     {**SLURM, "SLURM_ARRAY_JOB_ID": "40"})
        got = lst.wait(1)
    finally:
        lst.server.stop()
    assert (res.returncode, res.stderr) == (0, "")
    [msg] = got
    assert (msg.job_id, msg.event, msg.cluster, msg.array_job_id) == (
        42, HookEvent.START, "c1", 40)
    assert abs(msg.sent - time.time()) < 30
    assert msg.peer.reserved  # its uid was read: the socket stayed open for the "ok"


def test_ipv6_loopback(tmp_path):
    port = free_port()
    try:
        lst = Listener([f"tcp:[::1]:{port}"])
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        res, _ = run(installed(tmp_path, f"tcp:[::1]:{port}"),
                     {**SLURM, "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"})
        assert [(m.job_id, m.event) for m in lst.wait(1)] == [(42, HookEvent.END)]
    finally:
        lst.server.stop()
    assert (res.returncode, res.stderr) == (0, "")


def test_nobody_listening_exits_0_at_once_and_says_so(tmp_path):
    spec = f"tcp:127.0.0.1:{free_port()}"
    res, took = run(installed(tmp_path, spec), SLURM)
    assert res.returncode == 0 and took < 0.9
    assert res.stderr == (f"ccadapter hook: job 42: daemon not told ({spec} refused the "
                          "connection); the poll will pick the job up\n")


def test_a_full_listen_queue_holds_the_job_one_second_at_most(tmp_path):
    """A daemon that no longer accepts: once its listen queue is full, the kernel drops the
    SYN and bash's connect would wait for minutes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        spec = f"tcp:127.0.0.1:{listener.getsockname()[1]}"
        fill = []
        for _ in range(4):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(listener.getsockname())
            fill.append(sock)
        time.sleep(0.2)
        res, took = run(installed(tmp_path, spec), SLURM)
        for sock in fill:
            sock.close()
    assert res.returncode == 0 and 0.9 < took < 2.5
    assert f"daemon not told (no connection to {spec} within 1 s)" in res.stderr


def test_a_message_the_daemon_drops_is_said(tmp_path):
    port = free_port()
    lst = Listener([f"tcp:127.0.0.1:{port}"])
    try:
        res, _ = run(installed(tmp_path, f"tcp:127.0.0.1:{port}"),
                     {**SLURM, "SLURM_JOB_ID": '4"2\\'})
        assert len(lst.wait(1, "dropped")) == 1 and lst.got == []
    finally:
        lst.server.stop()
    assert res.returncode == 0
    assert "did not take the message (its log says why)" in res.stderr


@pytest.mark.parametrize(("spec", "env"), [
    ("unix:{tmp}/d.sock", SLURM),  # bash has no UNIX sockets
    ("tcp:127.0.0.1:{port}", {**SLURM, "SLURM_CLUSTER_NAME": "clüster"}),
    ("tcp:127.0.0.1:{port}", {**SLURM, "SLURM_CLUSTER_NAME": "c\t1"}),
])
def test_what_bash_cannot_say_exactly_goes_to_the_python_hook(tmp_path, spec, env):
    port = free_port()
    spec = spec.format(tmp=tmp_path, port=port)
    lst = Listener([spec])
    try:
        res, _ = run(installed(tmp_path, spec, python_venv(tmp_path)), env)
        got = lst.wait(1)
    finally:
        lst.server.stop()
    assert (res.returncode, res.stderr) == (0, "")
    assert [(m.job_id, m.cluster) for m in got] == [(42, env["SLURM_CLUSTER_NAME"])]


def test_an_unreadable_config_means_the_python_hooks_default(tmp_path):
    """No config (or one this user may not read): the Python hook's default socket, as
    before; with no venv either, it says so and exits 0."""
    script = installed(tmp_path, None)
    (tmp_path / "config.json").unlink()
    res, took = run(script, SLURM)
    assert res.returncode == 0 and took < 5
    assert "no-venv/bin/python3" in res.stderr


def test_a_newline_ends_a_message_on_a_socket_left_open(tmp_path):
    """What the bash hook relies on: the daemon answers "ok" before the sender closes."""
    spec = f"tcp:127.0.0.1:{free_port()}"
    lst = Listener([spec])
    try:
        sock = socket.create_connection(hook.parse_spec(spec)[1], timeout=5)
        sock.sendall(hook.build_message(SLURM) + b"\n")
        assert sock.recv(16) == b"ok\n"
        sock.close()
        assert [m.job_id for m in lst.wait(1)] == [42]
    finally:
        lst.server.stop()
