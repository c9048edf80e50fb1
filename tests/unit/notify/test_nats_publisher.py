"""NatsPublisher without a server: what it hands nats-py, how it answers each failure, how
it comes back after our side was refused (the real server: tests/integration/test_nats_live.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import ClassVar

import nats.errors
import nats.js.errors
import pytest

from ccadapter.config.secrets import safe_url
from ccadapter.notify import nats as pub_mod
from ccadapter.notify.message import Message
from ccadapter.notify.nats import NatsOptions, NatsPublisher, describe
from ccadapter.retry import RetryPolicy

SECRET = "s3cr3t-pw"
MSG = Message(b'job,function=start_job event="{}" 1', "c/1/100/start", "cc.job.event")


class FakeClient:
    """The part of nats-py's client the publisher uses; ``fail`` is raised by publish."""

    refusals: ClassVar[int] = 0  # how many connects to refuse (set per test)
    connects: ClassVar[list[dict]] = []

    def __init__(self) -> None:
        self.is_connected = self.is_closed = False
        self.published: list[tuple[str, bytes]] = []
        self.fail: BaseException | None = None

    async def connect(self, **kwargs) -> None:
        FakeClient.connects.append(kwargs)
        self.closed_cb = kwargs["closed_cb"]
        if FakeClient.refusals:
            FakeClient.refusals -= 1
            raise nats.errors.Error("nats: 'Authorization Violation'")
        self.is_connected = True

    def jetstream(self, timeout: float):
        return None

    async def publish(self, subject: str, data: bytes) -> None:
        if self.fail:
            raise self.fail
        self.published.append((subject, data))

    async def flush(self, timeout: float) -> None:
        return None

    async def close(self) -> None:
        """Like nats-py's: the closed callback runs, a refused connect's too."""
        self.is_connected, self.is_closed = False, True
        await self.closed_cb()


@pytest.fixture
def fake(monkeypatch):
    FakeClient.refusals, FakeClient.connects = 0, []
    monkeypatch.setattr(pub_mod.nats, "NATS", FakeClient)
    return FakeClient


def wait(pred, timeout=5.0):
    until = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.01)


def test_publish_before_start_or_after_close_says_stopped():
    pub = NatsPublisher(NatsOptions("nats://127.0.0.1:4222"))
    assert pub.publish(MSG).ok is False and pub.publish(MSG).error == "publisher stopped"
    pub.close()


def test_refused_credentials_are_said_without_the_password_and_tried_again(fake, caplog):
    fake.refusals = 2
    opts = NatsOptions(f"nats://ccad:{SECRET}@127.0.0.1:4222", user="ccad", password=SECRET)
    pub = NatsPublisher(opts, RetryPolicy(0.01, 0.02))
    with caplog.at_level(logging.ERROR):
        pub.start()
        try:
            wait(lambda: pub.connected)
            assert len(fake.connects) == 3  # two refusals, retried after the policy's delay
            assert pub.publish(MSG).ok
            assert pub._nc.published == [("cc.job.event", MSG.data)]
        finally:
            pub.close()
    assert "refused our credentials" in caplog.text and "natsUser/natsPassword" in caplog.text
    assert SECRET not in caplog.text and SECRET not in repr(pub) and SECRET not in repr(opts)


def test_a_connection_nats_py_gave_up_on_is_replaced_once(fake):
    fake.refusals = 1  # the refused connect's close must not start a second loop
    pub = NatsPublisher(NatsOptions("nats://127.0.0.1:4222"), RetryPolicy(0.01, 0.02))
    pub.start()
    try:
        wait(lambda: pub.connected)
        first = pub._nc
        asyncio.run_coroutine_threadsafe(first.close(), pub._loop).result(5)
        wait(lambda: pub.connected and pub._nc is not first)
        time.sleep(0.1)
        assert len(fake.connects) == 3  # refused, connected, replaced: nothing more
    finally:
        pub.close()
    assert len(fake.connects) == 3  # and shutting down starts none


@pytest.mark.parametrize(("error", "ok", "permanent", "says"), [
    (nats.errors.MaxPayloadError("maximum payload exceeded"), False, True, "bytes:"),
    (nats.js.errors.NoStreamResponseError(), False, False, "nats stream add --subjects"),
    (nats.errors.TimeoutError(), False, False, "timeout"),
    (OSError("broken pipe"), False, False, "broken pipe"),
])
def test_each_failure_is_an_answer_never_an_exception(fake, error, ok, permanent, says):
    pub = NatsPublisher(NatsOptions("nats://127.0.0.1:4222"))
    pub.start()
    try:
        wait(lambda: pub.connected)
        pub._nc.fail = error
        got = pub.publish(MSG)
        assert (got.ok, got.permanent) == (ok, permanent) and says in got.error
    finally:
        pub.close()


def test_not_connected_is_an_answer(fake):
    fake.refusals = 10**6  # never gets in
    pub = NatsPublisher(NatsOptions("nats://127.0.0.1:4222"), RetryPolicy(5, 5))
    pub.start()
    try:
        got = pub.publish(MSG)
        assert not got.ok and got.error.startswith("not connected: the server refused")
    finally:
        pub.close()


def test_close_during_a_connect_closes_its_socket():
    """A server that accepts but never greets keeps nats-py's connect waiting: closing the
    publisher then must close that socket and end the connect, not leave both to the
    garbage collector (CI saw a pending task and an unclosed socket after the wrong-password
    test)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        pub = NatsPublisher(NatsOptions(f"nats://127.0.0.1:{silent.getsockname()[1]}",
                                        publish_timeout=30))
        pub.start()
        silent.settimeout(10)
        conn, _ = silent.accept()
        with conn:
            started = time.monotonic()
            pub.close()
            assert time.monotonic() - started < 5
            conn.settimeout(5)
            assert conn.recv(100) == b""  # the client's end is closed
        assert not pub._tasks


def connect_kwargs(opts: NatsOptions) -> dict:
    pub = NatsPublisher(opts)
    try:
        return pub._connect_kwargs()
    finally:
        pub.close()


def test_connect_arguments_follow_the_options(tmp_path):
    creds, seed = tmp_path / "u.creds", tmp_path / "u.nk"
    kw = connect_kwargs(NatsOptions("nats://h:4222", creds_file=str(creds),
                                    nkey_seed_file=str(seed), reconnect_wait=3))
    assert kw["user_credentials"] == str(creds) and "nkeys_seed" not in kw  # creds win
    assert (kw["servers"], kw["max_reconnect_attempts"], kw["reconnect_time_wait"]) == (
        ["nats://h:4222"], -1, 3)
    assert "tls" not in kw and "user" not in kw
    nkey = connect_kwargs(NatsOptions("tls://h:4222", nkey_seed_file=str(seed), user="u",
                                      password="p"))
    assert nkey["nkeys_seed"] == str(seed) and (nkey["user"], nkey["password"]) == ("u", "p")
    assert nkey["tls"] is not None  # tls:// asks for TLS with the system's CAs


def test_describe_and_safe_url():
    assert "check natsUser/natsPassword" in describe(nats.errors.AuthorizationError())
    assert describe(nats.errors.Error("x")) == "x"
    assert safe_url(f"nats://u:{SECRET}@h:4222") == "nats://h:4222"
    assert safe_url("nats://h:4222") == "nats://h:4222"
