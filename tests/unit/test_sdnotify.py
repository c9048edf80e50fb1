import os
import socket

from ccadapter.runtime.sdnotify import notify, watchdog_interval


def test_notify_datagram(tmp_path):
    path = tmp_path / "n.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        assert notify("READY=1", {"NOTIFY_SOCKET": str(path)})
        assert sock.recv(100) == b"READY=1"


def test_notify_abstract_namespace():
    name = f"ccadapter-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        assert notify("WATCHDOG=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(100) == b"WATCHDOG=1"


def test_no_manager_no_noise(tmp_path):
    assert not notify("READY=1", {})
    assert not notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "absent")})


def test_watchdog_interval():
    assert watchdog_interval({"WATCHDOG_USEC": "120000000"}) == 60.0
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}) is None
    own = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(own) == 1.0
