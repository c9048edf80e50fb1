"""The hook and the daemon's listener, talking over real sockets on this machine."""

import ipaddress
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ccadapter.prep.hook as hook
import ccadapter.prep.server as server_module
from ccadapter.prep.messages import BadMessage, HookEvent, parse_message
from ccadapter.prep.server import PrepServer

ENV = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "42",
       "SLURM_CLUSTER_NAME": "c1", "PATH": "/usr/bin", "SLURM_JOB_USER": "u"}


@pytest.mark.parametrize(("spec", "family", "address"), [
    ("/run/x.sock", socket.AF_UNIX, "/run/x.sock"),
    ("unix:/run/x.sock", socket.AF_UNIX, "/run/x.sock"),
    ("tcp:127.0.0.1:1234", socket.AF_INET, ("127.0.0.1", 1234)),
    ("tcp:[::1]:1234", socket.AF_INET6, ("::1", 1234)),
    ("tcp::1234", socket.AF_INET, ("127.0.0.1", 1234)),
])
def test_socket_specs(spec, family, address):
    assert hook.parse_spec(spec) == (family, address)


def test_bad_spec():
    with pytest.raises(ValueError, match="unknown socket type"):
        hook.parse_spec("udp:1.2.3.4:5")


@pytest.mark.parametrize(("data", "reason"), [
    (b"x" * (64 * 1024 + 1), "over"),
    (b"not json at all", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({**ENV, "SLURM_SCRIPT_CONTEXT": "prolog"}).encode(), "SLURM_SCRIPT_CONTEXT"),
    (json.dumps({**ENV, "SLURM_JOB_ID": "12a"}).encode(), "not a job id"),
    (json.dumps({**ENV, "SLURM_CLUSTER_NAME": 7}).encode(), "not a cluster name"),
    (json.dumps({**ENV, "SLURM_CLUSTER_NAME": ""}).encode(), "not a cluster name"),
    (b"\xff\xfe", "not JSON"),
])
def test_bad_messages_name_the_problem(data, reason):
    with pytest.raises(BadMessage, match=reason):
        parse_message(data, "c1")


# Found by tests/unit/fuzz/test_prep_server_fuzz.py: each escaped parse_message as another
# exception than BadMessage and ended the server's thread (no hook message was heard again).
@pytest.mark.parametrize(("data", "reason"), [
    (b"[" * 5000 + b"]" * 5000, "nested too deeply"),  # RecursionError
    (json.dumps({**ENV, "SLURM_SCRIPT_CONTEXT": ["prolog_slurmctld"]}).encode(),
     "SLURM_SCRIPT_CONTEXT"),  # TypeError: unhashable type: 'list'
    (json.dumps({**ENV, "SLURM_JOB_ID": "²"}).encode(), "not a job id"),  # ValueError from int
    (json.dumps({**ENV, "SLURM_JOB_ID": "1" * 4301}).encode(), "not a job id"),  # digit limit
    (json.dumps({**ENV, "SLURM_JOB_ID": "١٢"}).encode(), "not a job id"),  # was read as 12
])
def test_inputs_that_escaped_as_other_errors(data, reason):
    with pytest.raises(BadMessage, match=reason):
        parse_message(data, "c1")


@pytest.mark.parametrize(("sent", "expected"), [
    # found by fuzzing: OverflowError, int too large to convert to float
    pytest.param(10**309, None, id="int-past-float"),
    ("1e999", None), ("inf", None), ("nan", None), (True, None), ([1.5], None),
    ("1795305521.25", 1795305521.25), (1795305521, 1795305521.0),
])
def test_sent_time_is_a_finite_number_or_none(sent, expected):
    body = {**ENV, "CCADAPTER_HOOK_SENT": sent}
    assert parse_message(json.dumps(body).encode(), "c1").sent == expected


def test_message_from_hook_environment():
    msg = parse_message(hook.build_message(ENV), "c1")
    assert (msg.job_id, msg.event, msg.cluster) == (42, HookEvent.START, "c1")
    assert msg.sent is not None
    assert "PATH" not in json.loads(hook.build_message(ENV))


@pytest.mark.parametrize(("context", "event", "word"), [
    ("prolog_slurmctld", HookEvent.START, "start"),
    ("epilog_slurmctld", HookEvent.END, "end"),
])
def test_hook_events_keep_their_words_in_the_log(context, event, word):
    """The hook sends SLURM_SCRIPT_CONTEXT as slurmctld sets it (it knows no enum); the
    daemon reads a HookEvent that logs and compares as the word it was before."""
    msg = parse_message(hook.build_message({**ENV, "SLURM_SCRIPT_CONTEXT": context}), "c1")
    assert msg.event is event
    assert msg.event == word and f"{msg.event}" == str(msg.event) == word


def test_a_message_names_its_cluster_else_the_socket_does():
    other = {**ENV, "SLURM_CLUSTER_NAME": "c2"}
    assert parse_message(hook.build_message(other), "c1").cluster == "c2"
    assert parse_message(hook.build_message(other), None).cluster == "c2"
    nameless = {k: v for k, v in ENV.items() if k != "SLURM_CLUSTER_NAME"}
    assert parse_message(hook.build_message(nameless), "c1").cluster == "c1"
    with pytest.raises(BadMessage, match="no SLURM_CLUSTER_NAME"):
        parse_message(hook.build_message(nameless), None)


class Listener:
    def __init__(self, specs, group=None, **kwargs):
        self.got, self.dropped = [], []
        self.server = PrepServer(specs, "c1", self.got.append, group=group,
                                 on_drop=lambda reason, _: self.dropped.append(reason),
                                 **kwargs).start()

    def wait(self, n, what="got", timeout=5):
        until = time.time() + timeout
        while len(getattr(self, what)) < n and time.time() < until:
            time.sleep(0.01)
        return getattr(self, what)


def raw_send(spec, data, close=True):
    family, address = hook.parse_spec(spec)
    s = socket.socket(family, socket.SOCK_STREAM)
    s.connect(address)
    s.sendall(data)
    if close:
        s.shutdown(socket.SHUT_WR)
        s.recv(16)
        s.close()
    return s


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_garbage_is_dropped_and_the_server_goes_on(tmp_path):
    spec = f"unix:{tmp_path}/d.sock"
    lst = Listener([spec])
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "d.sock").st_mode) == 0o660
        for data in (b"garbage", b"{}", b"x" * 70_000,
                     json.dumps({**ENV, "SLURM_JOB_ID": "-1"}).encode()):
            raw_send(spec, data)
        slow = raw_send(spec, b'{"SLURM_', close=False)  # never finishes its message
        assert len(lst.wait(5, "dropped")) == 5
        slow.close()
        assert hook.main(["--socket", spec], env=ENV) == 0
        assert [m.job_id for m in lst.wait(1)] == [42]
    finally:
        lst.server.stop()
    assert not (tmp_path / "d.sock").exists()


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_tcp(host):
    spec = f"tcp:{host}:{free_port()}"
    try:
        lst = Listener([spec])
    except OSError:
        if ":" not in host:
            raise
        pytest.skip("no IPv6 loopback on this machine")
    try:
        env = {**ENV, "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
        assert hook.main(["--socket", spec], env=env) == 0
        assert [(m.job_id, m.event) for m in lst.wait(1)] == [(42, HookEvent.END)]
    finally:
        lst.server.stop()


def test_an_error_in_on_message_costs_one_connection_only(tmp_path, caplog):
    """Found by fuzzing: any exception but BadMessage ended the server's thread for good."""
    got = []

    def on_message(msg):
        if msg.job_id == 1:
            raise RuntimeError("consumer bug")
        got.append(msg.job_id)

    spec = f"unix:{tmp_path}/d.sock"
    server = PrepServer([spec], "c1", on_message).start()
    try:
        assert hook.main(["--socket", spec], env={**ENV, "SLURM_JOB_ID": "1"}) == 0
        assert hook.main(["--socket", spec], env={**ENV, "SLURM_JOB_ID": "2"}) == 0
        until = time.time() + 5
        while not got and time.time() < until:
            time.sleep(0.01)
        assert got == [2]
    finally:
        server.stop()
    assert "hook connection failed" in caplog.text and "consumer bug" in caplog.text


def test_each_cluster_socket_gives_its_cluster_to_nameless_messages(tmp_path):
    """prepSockClusterListenPaths: a socket per cluster beside the shared one; a message is
    routed by the cluster it names, and one naming none belongs to its socket's cluster."""
    shared, own = f"unix:{tmp_path}/shared.sock", f"unix:{tmp_path}/c2.sock"
    got, dropped = [], []

    def route(msg):
        if msg.cluster not in ("c1", "c2"):
            raise BadMessage(f"cluster {msg.cluster!r} is not ours ('c1', 'c2')")
        got.append((msg.job_id, msg.cluster))

    server = PrepServer([shared], None, route, on_drop=lambda reason, _: dropped.append(reason),
                        cluster_specs={own: "c2"}).start()
    nameless = {k: v for k, v in ENV.items() if k != "SLURM_CLUSTER_NAME"}
    try:
        for spec, env in ((own, {**nameless, "SLURM_JOB_ID": "1"}),
                          (own, {**ENV, "SLURM_JOB_ID": "2"}),  # names c1: goes to c1
                          (shared, {**ENV, "SLURM_CLUSTER_NAME": "c2", "SLURM_JOB_ID": "3"}),
                          (shared, {**nameless, "SLURM_JOB_ID": "4"}),  # whose? dropped
                          (shared, {**ENV, "SLURM_CLUSTER_NAME": "c9", "SLURM_JOB_ID": "5"})):
            assert hook.main(["--socket", spec], env=env) == 0
        until = time.time() + 5
        while len(got) + len(dropped) < 5 and time.time() < until:
            time.sleep(0.01)
    finally:
        server.stop()
    assert got == [(1, "c2"), (2, "c1"), (3, "c2")]
    assert dropped == ["invalid", "invalid"]


def test_stale_socket_file_is_replaced(tmp_path):
    path = tmp_path / "d.sock"
    old = socket.socket(socket.AF_UNIX)
    old.bind(str(path))
    old.close()  # a crash leaves the file behind
    probe = socket.socket(socket.AF_UNIX)
    with probe, pytest.raises(ConnectionRefusedError):  # nobody listens on the stale one
        probe.connect(str(path))
    lst = Listener([str(path)])
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o660  # made afresh by the server
        assert hook.main(["--socket", str(path)], env=ENV) == 0  # and it answers
        assert [m.job_id for m in lst.wait(1)] == [42]
    finally:
        lst.server.stop()


def test_hook_exits_0_fast_without_daemon(tmp_path, capsys):
    started = time.monotonic()
    assert hook.main(["--socket", str(tmp_path / "none.sock")], env=ENV) == 0
    assert time.monotonic() - started < 1.0
    assert "job 42: daemon not told" in capsys.readouterr().err


def test_hook_gives_up_after_a_second_on_a_silent_daemon(tmp_path):
    path = tmp_path / "silent.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(1)  # accepts into the backlog, never reads or answers
    started = time.monotonic()
    assert hook.main(["--socket", str(path)], env=ENV) == 0
    assert time.monotonic() - started < 1.5
    srv.close()


def test_hook_reads_socket_from_config(tmp_path):
    spec = f"unix:{tmp_path}/c.sock"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"PREPSOCKCONNECTPATH": spec}))  # case-insensitive like Go
    lst = Listener([spec])
    try:
        assert hook.main(["--config", str(cfg)], env=ENV) == 0
        assert len(lst.wait(1)) == 1
    finally:
        lst.server.stop()


def test_hook_as_slurm_runs_it_imports_only_the_standard_library(tmp_path):
    """python3 -I -S hook.py: no site-packages at all, and exit 0 without a daemon."""
    code = (f"import runpy, sys; sys.argv = ['hook', '--socket', '{tmp_path}/x.sock']\n"
            f"try:\n    runpy.run_path({hook.__file__!r}, run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('click', 'pydantic', 'requests', 'tenacity', 'ccadapter')]\n"
            "assert not bad, bad\n")
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                         text=True, env={"SLURM_JOB_ID": "7"}, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    assert Path(hook.__file__).name == "hook.py"


def test_burst_of_a_thousand_messages(tmp_path):
    spec = f"unix:{tmp_path}/b.sock"
    lst = Listener([spec])
    try:
        def send(first):
            for i in range(first, first + 250):
                hook.main(["--socket", spec], env={**ENV, "SLURM_JOB_ID": str(i)})

        threads = [threading.Thread(target=send, args=(k * 250 + 1,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(m.job_id for m in lst.wait(1000)) == list(range(1, 1001))
    finally:
        lst.server.stop()


def test_message_json_round_trips_awkward_values():
    env = {"SLURM_JOB_NAME": 'a "quoted", back\\slash\nnew line\ttab \x01 é 😀',
           "SLURM_BAD_BYTES": b"caf\xe9".decode("utf-8", "surrogateescape"),
           "SLURM_JOB_ID": "5", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
    body = json.loads(hook.build_message(env))
    assert body["SLURM_JOB_NAME"] == env["SLURM_JOB_NAME"]
    assert body["SLURM_BAD_BYTES"] == env["SLURM_BAD_BYTES"]
    assert parse_message(hook.build_message(env), "c1").job_id == 5


@pytest.mark.parametrize(("text", "expected"), [
    ('{"prepSockConnectPath": "tcp:127.0.0.1:9"}', "tcp:127.0.0.1:9"),
    ('{\n  "PrepSockConnectPath" :\n "/run/a\\/b\\"c.sock", "x": 1}', '/run/a/b"c.sock'),
    ('{"prepSockConnectPath": "\\u002frun/x"}', "/run/x"),
    ('{"other": 1}', None),
    ('{"prepSockConnectPath": ""}', None),
])
def test_socket_read_from_config_without_json_module(tmp_path, text, expected):
    cfg = tmp_path / "c.json"
    cfg.write_text(text)
    assert hook.socket_from_config(str(cfg)) == expected


def test_hook_imports_nothing_beyond_builtins(tmp_path):
    res = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", hook.__file__,
                          "--socket", str(tmp_path / "none.sock")], capture_output=True,
                         text=True, timeout=30, check=False, env={"SLURM_JOB_ID": "1"})
    assert res.returncode == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert imported and not imported & {"json", "re", "socket", "enum", "selectors"}, imported


def test_tcp_peers_outside_the_allowed_networks_are_closed_unread():
    port = free_port()
    spec = f"tcp:127.0.0.1:{port}"
    lst = Listener([spec], allowed=[ipaddress.ip_network("10.0.0.0/8")])
    try:
        assert hook.main(["--socket", spec], env=ENV) == 0  # said on stderr, exits 0
        assert lst.wait(1, "dropped") == ["peer"] and lst.got == []
    finally:
        lst.server.stop()
    lst = Listener([spec], allowed=[ipaddress.ip_network("127.0.0.1")])
    try:
        assert hook.main(["--socket", spec], env=ENV) == 0
        assert [m.job_id for m in lst.wait(1)] == [42] and lst.dropped == []
    finally:
        lst.server.stop()


@pytest.mark.parametrize(("peer", "allowed"), [
    ("::ffff:127.0.0.1", True), ("::ffff:10.9.8.7", False), ("::ffff:192.0.2.1", False),
    ("127.0.0.1", True), ("fe80::1%eth0", False)])
def test_ipv4_mapped_peers_are_judged_by_their_ipv4_address(peer, allowed):
    """A dual-stack TCP socket (``tcp:[::]:PORT``) sees an IPv4 client as ``::ffff:a.b.c.d``;
    the allow-list names IPv4 networks. Tested without an IPv6 address on the host: the
    peer as the socket reports it, judged by the server (issue 35: the IPv6 tests that skip
    on such hosts hid this branch)."""
    judge = server_module.PrepServer(["tcp:127.0.0.1:1"], "c", lambda msg: None,
                                     allowed=[ipaddress.ip_network("127.0.0.0/8")])
    assert judge._allowed(peer) is allowed


def test_half_sent_connections_beyond_the_cap_wait_in_the_listen_queue(monkeypatch):
    """A flood of connections that never finish costs at most MAX_CONNECTIONS buffers; the
    others wait in the kernel's queue and are read once the first expire."""
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 4)
    spec = f"tcp:127.0.0.1:{free_port()}"
    lst = Listener([spec])
    try:
        slow = [raw_send(spec, b'{"SLURM_', close=False) for _ in range(10)]
        time.sleep(0.3)
        assert len(lst.server._conns) == 4  # the other 6 are not accepted yet
        assert lst.wait(10, "dropped", timeout=5) == ["timeout"] * 10  # 4, 4, then 2
        for s in slow:
            s.close()
        assert hook.main(["--socket", spec], env={**ENV, "SLURM_JOB_ID": "43"}) == 0
        assert 43 in [m.job_id for m in lst.wait(2)]
    finally:
        lst.server.stop()


def test_a_config_the_hook_may_not_read_means_the_default_socket(tmp_path, monkeypatch,
                                                                 capsys):
    """Issue 29: the hook runs as SlurmUser; a config file holding the JWT (the daemon's
    alone) made every job's hook fail with PermissionError: the fast path was silently off.
    Now it sends to the default socket, and says the file only if that fails too."""
    def refused(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(hook, "socket_from_config", refused)
    spec = f"unix:{tmp_path}/default.sock"
    monkeypatch.setattr(hook, "DEFAULT_SOCKET", spec)
    lst = Listener([spec])
    try:
        assert hook.main(["--config", "/etc/secret.json"], env=ENV) == 0
        assert [m.job_id for m in lst.wait(1)] == [42]
    finally:
        lst.server.stop()
    assert capsys.readouterr().err == ""
    assert hook.main(["--config", "/etc/secret.json"], env=ENV) == 0  # nobody listens now
    assert "/etc/secret.json is not readable by this user, so the default socket was used" \
        in capsys.readouterr().err


SHIPPED_HOOK = Path(__file__).resolve().parents[3] / "hooks" / "ccadapter-hook.sh"


def python_venv(tmp: Path, python: str = sys.executable, lib: str = "python3.11") -> Path:
    """A venv as the shipped script finds it: ``bin/python3`` and the hook module under
    ``lib/LIB/site-packages/ccadapter/prep`` (this checkout's)."""
    venv = tmp / "venv"
    prep = venv / "lib" / lib / "site-packages" / "ccadapter"
    prep.mkdir(parents=True, exist_ok=True)
    if not (prep / "prep").exists():
        (prep / "prep").symlink_to(Path(hook.__file__).parent)
    (venv / "bin").mkdir(exist_ok=True)
    if not (venv / "bin" / "python3").exists():
        (venv / "bin" / "python3").symlink_to(python)
    return venv


def site_hook(venv: Path | str, config: Path | str) -> str:
    """hooks/ccadapter-hook.sh with a site's VENV and CONFIG set, as its comment asks."""
    return (SHIPPED_HOOK.read_text().replace("VENV=/opt/ccadapter", f"VENV={venv}")
            .replace("CONFIG=/etc/cc-slurm-adapter/config.json", f"CONFIG={config}"))


def test_the_shipped_script_finds_the_hook_in_any_python_of_the_venv(tmp_path):
    """hooks/ccadapter-hook.sh as a site installs it: VENV and CONFIG set, the module found
    by a glob over the venv's lib/python3.* (it hard-coded python3.11)."""
    venv = python_venv(tmp_path, lib="python3.42")
    spec = f"unix:{tmp_path}/d.sock"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"prepSockConnectPath": spec}))
    script = tmp_path / "ccadapter-hook.sh"
    script.write_text(site_hook(venv, cfg))
    script.chmod(0o755)
    lst = Listener([spec])
    try:
        res = subprocess.run([str(script)], env={**ENV, "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 0 and res.stderr == ""
        assert [m.job_id for m in lst.wait(1)] == [42]
    finally:
        lst.server.stop()
