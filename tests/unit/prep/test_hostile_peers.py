"""The hook socket against another local user (issue 36): who a connection is from, as the
kernel says, and idle connections that cannot take the socket from slurmctld's own hooks.

The other user is a real one (``nobody``, running Debian's python3), on a real UNIX or
loopback TCP socket: root in a test would be slurmctld's own, and hide what it may do."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import ccadapter.prep.hook as hook
from ccadapter.prep.peers import Peer, PeerIdentity, loopback_uid
from ccadapter.prep.server import MAX_CONNECTIONS, PER_PEER, RESERVE
from ccadapter.prep.shares import Bucket, Shares, ShareSettings
from ccadapter.slurm.formats.text import parse_slurm_uid
from tests.unit.prep.test_hook_and_server import ENV, Listener, free_port

NOBODY = 65534
PYTHON = "/usr/bin/python3"  # the venv's interpreter lives under /root, which nobody cannot read

# what another user could run (tests/integration/hostile.py, standard library only)
HOSTILE = Path(__file__).parents[2] / "integration" / "hostile.py"


@pytest.fixture
def shared_dir():
    """A directory another user may reach (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="ccadapter-hostile-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, *argv], user=NOBODY, group=NOBODY,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("family", ["unix", "tcp"])
def test_another_user_is_known_by_its_uid_and_root_is_slurmctlds_own(family, shared_dir):
    judge = PeerIdentity(lambda uid: uid == 0)
    if family == "unix":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(shared_dir / "p.sock"))
        os.chmod(shared_dir / "p.sock", 0o666)
        client = f"s=socket.socket(socket.AF_UNIX); s.connect({str(shared_dir / 'p.sock')!r})"
        mine = socket.socket(socket.AF_UNIX)
        address = str(shared_dir / "p.sock")
    else:
        listener = socket.create_server(("127.0.0.1", 0))
        address = listener.getsockname()
        client = f"s=socket.create_connection({address!r})"
        mine = socket.socket(socket.AF_INET)
    listener.listen()
    with listener, mine:
        other = as_nobody("-c", f"import socket, time; {client}; time.sleep(3)")
        try:
            conn, peer = listener.accept()
            with conn:
                assert judge.of(conn, peer) == Peer(f"uid {NOBODY}", reserved=False)
        finally:
            other.kill()
            other.communicate()
        mine.connect(address)
        conn, peer = listener.accept()
        with conn:
            assert judge.of(conn, peer).key == "uid 0" and judge.of(conn, peer).reserved


def test_a_remote_address_is_reserved_only_when_the_administrator_allowed_it():
    judge = PeerIdentity(lambda uid: False, [ipaddress.ip_network("10.1.2.0/24")])

    class Remote:
        family = socket.AF_INET

        @staticmethod
        def getsockname():
            return ("10.1.2.254", 6818)  # this host's own address

    assert judge.of(Remote(), ("10.1.2.3", 5)).reserved  # type: ignore[arg-type]
    assert not judge.of(Remote(), ("10.9.9.9", 5)).reserved  # type: ignore[arg-type]
    assert judge.of(Remote(), ("10.9.9.9", 5)).key == "10.9.9.9"  # type: ignore[arg-type]


def test_a_stranger_that_closes_before_the_accept_does_not_pass_for_root():
    """The kernel says uid 0 of an orphaned socket (its process closed it after sending,
    before the daemon accepted): that is nobody's, not root's."""
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        other = as_nobody("-c", "import socket; s=socket.create_connection("
                          f"{listener.getsockname()!r}); s.sendall(b'x'); s.close()")
        other.communicate(timeout=10)
        conn, peer = listener.accept()
        with conn:
            assert loopback_uid(conn) is None
            assert PeerIdentity(lambda uid: uid == 0).of(conn, peer) == Peer("127.0.0.1")


def test_a_loopback_connection_that_went_away_has_no_uid():
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        client.close()
        time.sleep(0.1)
        with conn:
            assert loopback_uid(conn) in (None, 0)  # gone, or still in TIME_WAIT as root's


@pytest.mark.parametrize("family", ["unix", "tcp"])
def test_idle_connections_of_another_user_never_keep_slurmctlds_hook_out(family, shared_dir):
    """Issue 36, item 3: 256 connections were read at once, with no cap per peer, each given
    a second; whoever held them all kept every real prolog out (the hook gives up after its
    second). Now another user holds PER_PEER of them, all others together MAX_CONNECTIONS
    less RESERVE, and slurmctld's own hook (root here) is read within its second."""
    if family == "unix":
        spec, target = f"unix:{shared_dir}/h.sock", str(shared_dir / "h.sock")
    else:
        port = free_port()
        spec, target = f"tcp:127.0.0.1:{port}", str(port)
    lst = Listener([spec])
    if family == "unix":
        os.chmod(target, 0o666)  # as the socket's group would let the other user in
    holder = as_nobody(str(HOSTILE), "idle", spec, "c1", "-", "6", "900")
    try:
        time.sleep(1.0)
        took = []
        for job_id in range(100, 120):
            env = {**ENV, "SLURM_JOB_ID": str(job_id)}
            began = time.monotonic()
            try:
                hook.send(spec, hook.build_message(env), began + hook.BUDGET)
                took.append(time.monotonic() - began)
            except OSError:
                took.append(float("inf"))
            time.sleep(0.1)
        held = dict(lst.server._held)
    finally:
        holder.kill()
        _, errors = holder.communicate()
        lst.server.stop()
    assert not errors.strip(), errors.decode()[-2000:]
    assert [m.job_id for m in lst.got] == list(range(100, 120)), took
    assert max(took) < hook.BUDGET, took
    assert held == {"uid 65534": PER_PEER}
    assert "connections" in lst.dropped
    assert MAX_CONNECTIONS - RESERVE >= PER_PEER


def test_shares_bound_each_sender_and_all_together_and_keep_the_reserve():
    now = [0.0]
    shares = Shares(ShareSettings(peer_rate=1, peer_burst=3, total_rate=2, total_burst=5,
                                  reserve_rate=0, reserve_burst=4), lambda: now[0])
    a, b, c, own = Peer("uid 1"), Peer("uid 2"), Peer("uid 3"), Peer("uid 0", True)
    assert [shares.take(a, 1) for _ in range(4)] == [True, True, True, False]  # its burst
    assert [shares.take(b, 1) for _ in range(3)] == [True, True, False]  # the total's
    assert not shares.take(c, 1)
    assert [shares.take(own, 2) for _ in range(3)] == [True, True, False]  # its own reserve
    now[0] += 1.0  # one more for a, two more in total
    assert shares.take(a, 1) and shares.take(c, 1) and not shares.take(c, 1)
    bucket = Bucket(1, 2, 0.0)
    assert bucket.level(10.0) == 2  # never above its burst


def test_slurmusers_uid_is_read_from_slurmctlds_config():
    """``scontrol show config`` prints ``SlurmUser = slurm(64030)``: the uid the hook runs
    as, whose messages are slurmctld's own."""
    assert parse_slurm_uid("SlurmUser               = slurm(64030)\n") == 64030
    assert parse_slurm_uid("SlurmUser               = root(0)\n") == 0
    assert parse_slurm_uid("SlurmctldPort = 6817\n") is None
