"""Issue 5 against a real nats-server: what arrives, once; outages; crashes; every auth variant.

The outbox and the delivery engine are the daemon's own; the server is Debian's nats-server
on 127.0.0.1. What arrives is read back from the stream (JetStream) or by a subscriber
(core NATS) and decoded with the strict line-protocol reader and cc-backend's JSON rules.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import nats
import pytest

from ccadapter.daemon.deliverer import Deliverer
from ccadapter.notify.nats import NatsOptions, NatsPublisher
from ccadapter.notify.nats_delivery import NatsDelivery, Subjects
from ccadapter.outbox import DeliveryStatus, NewEvent, Outbox, Result, admin
from ccadapter.retry import RetryPolicy
from tests.lineproto import parse_line
from tests.natsserver import (
    NatsServer,
    add_stream,
    nkey_setup,
    operator_setup,
    require_nats_server,
    stream_messages,
    tls_setup,
)
from tests.standin.ccbackend import JOB, STOP_REQUEST, decode_body

pytestmark = pytest.mark.integration

SECRET = "nats-pw-6a1f0c9e"
SCRIPT = '#!/bin/sh\necho "quotes", commas, spaces \\ backslashes\nexit 0\n'


@pytest.fixture(autouse=True)
def _nats_server_present():
    require_nats_server()


def job_events(n: int, first: int = 1) -> list[NewEvent]:
    out = []
    for job in range(first, first + n):
        t = 1_700_000_000 + job
        start = {"jobId": job, "cluster": "c", "user": "u", "project": "p", "startTime": t,
                 "numNodes": 1, "numHwthreads": 1, "partition": "main",
                 "resources": [{"hostname": "n1"}], "metaData": {"jobScript": SCRIPT}}
        stop = {"jobId": job, "cluster": "c", "startTime": t, "stopTime": t + 5,
                "jobState": "completed"}
        out += [NewEvent("c", job, t, "start", start), NewEvent("c", job, t, "stop",
                                                                  {"stop": stop, "start": start})]
    return out


def decode(data: bytes) -> tuple[str, dict]:
    point = parse_line(data.decode())
    assert point.measurement == "job" and point.tags["type"] == "node"
    body = json.loads(point.fields["event"])
    if point.tags["function"] == "start_job":
        decode_body(body, None, JOB)
        assert point.timestamp == body["startTime"] * 10**9
    else:
        decode_body(body, None, STOP_REQUEST)
        assert point.tags["partition"] == "main"
        assert point.timestamp == body["stopTime"] * 10**9
    return point.tags["function"], body


def publisher(server: NatsServer, jetstream: bool = True, **opts) -> NatsPublisher:
    pub = NatsPublisher(NatsOptions(url=server.url, jetstream=jetstream,
                                    publish_timeout=2.0, reconnect_wait=0.5, **opts))
    pub.start()
    return pub


def wait_connected(pub: NatsPublisher, timeout: float = 20) -> None:
    until = time.time() + timeout
    while not pub.connected:
        assert time.time() < until, f"not connected: {pub.last_error}"
        time.sleep(0.05)


def nats_only(tmp_path, pub: NatsPublisher) -> tuple[Outbox, Deliverer]:
    box = Outbox(tmp_path / "outbox.sqlite", backoff=RetryPolicy(base=0.2, cap=1.0))
    return box, Deliverer(box.queue, NatsDelivery(pub, "ctl", Subjects("jobs")), workers=4)


def drain(d: Deliverer, expect: int, timeout: float = 60) -> int:
    done, until = 0, time.time() + timeout
    while done < expect:
        assert time.time() < until, f"only {done} of {expect} published"
        done += d.run_once().delivered
        time.sleep(0.1)
    return done


class Subscriber:
    """A core-NATS subscriber in a thread of its own."""

    def __init__(self, url: str, subject: str = "jobs") -> None:
        self.url, self.subject = url, subject
        self.messages: list[bytes] = []
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        nc = await nats.connect(self.url)

        async def got(msg):
            self.messages.append(msg.data)
        await nc.subscribe(self.subject, cb=got)
        await nc.flush()
        self._ready.set()
        await self._stop.wait()
        await nc.drain()

    def __enter__(self) -> Subscriber:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop and self._stop
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def test_core_nats_after_rest_each_event_arrives_once(tmp_path):
    with NatsServer(tmp_path / "srv", jetstream=False) as server, Subscriber(server.url) as sub:
        box = Outbox(tmp_path / "outbox.sqlite", notify=True)
        box.enqueue(job_events(20))
        while due := box.queue.due():  # what cc-backend took (REST) is owed to NATS
            box.queue.record([Result(e.id, DeliveryStatus.DELIVERED) for e in due])
        pub = publisher(server, jetstream=False)
        wait_connected(pub)
        d = Deliverer(box.notifications(), NatsDelivery(pub, "ctl", Subjects("jobs")), workers=4)
        assert drain(d, 40) == 40
        assert d.run_once().delivered == 0  # nothing owed any more
        until = time.time() + 10
        while len(sub.messages) < 40 and time.time() < until:
            time.sleep(0.05)
        time.sleep(0.3)
        got = [decode(m) for m in sub.messages]
        assert sorted((f, b["jobId"]) for f, b in got) == sorted(
            (f, j) for j in range(1, 21) for f in ("start_job", "stop_job"))
        for job in range(1, 21):  # per job: start before stop
            order = [f for f, b in got if b["jobId"] == job]
            assert order == ["start_job", "stop_job"]
        assert json.loads(parse_line(sub.messages[0].decode()).fields["event"])[
            "metaData"]["jobScript"] == SCRIPT
        d.close()
        pub.close()
        box.close()


def test_jetstream_crash_between_publish_and_record_leaves_one_copy(tmp_path):
    with NatsServer(tmp_path / "srv") as server:
        add_stream(server.url)
        pub = publisher(server)
        wait_connected(pub)
        box, d = nats_only(tmp_path, pub)
        box.enqueue(job_events(10))

        class Crash(Exception):
            pass

        def crash(results):  # the process dies after the stream acknowledged
            raise Crash
        box.queue.record = crash  # type: ignore[method-assign]
        with pytest.raises(Crash):
            d.run_once()
        box.close()
        box2, d2 = nats_only(tmp_path, pub)  # restart: the same events are due again
        assert len(box2.queue.due()) == 10  # the stops wait for their starts
        assert drain(d2, 20) == 20
        msgs = stream_messages(server.url)
        assert len(msgs) == 20  # the resends were dropped by Nats-Msg-Id
        assert len({decode(m)[1]["jobId"] for m in msgs}) == 10
        for x in (d, d2):
            x.close()
        pub.close()
        box2.close()


def test_server_down_30s_then_everything_arrives_once(tmp_path):
    server = NatsServer(tmp_path / "srv").start()
    try:
        add_stream(server.url)
        pub = publisher(server)
        wait_connected(pub)
        box, d = nats_only(tmp_path, pub)
        box.enqueue(job_events(5))
        assert drain(d, 10) == 10
        server.stop()
        box.enqueue(job_events(15, first=6))
        down_until = time.time() + 30
        while time.time() < down_until:  # the daemon keeps trying: nothing gets through
            assert d.run_once().delivered == 0
            time.sleep(1)
        assert not pub.connected
        server.start()  # same port, same store
        assert drain(d, 30, timeout=90) == 30
        msgs = stream_messages(server.url)
        assert sorted(decode(m)[1]["jobId"] for m in msgs) == sorted(
            j for j in range(1, 21) for _ in range(2))
        d.close()
        pub.close()
        box.close()
    finally:
        server.stop()


@pytest.mark.parametrize("variant", ["userpass", "nkey", "creds", "tls"])
def test_auth_variants(tmp_path, variant):
    srv_dir = tmp_path / "srv"
    srv_dir.mkdir()
    opts: dict = {}
    client_auth: dict = {}
    url_scheme = "nats"
    jetstream = True
    if variant == "userpass":
        auth = f'authorization {{ users = [ {{ user: cc, password: "{SECRET}" }} ] }}'
        opts = {"user": "cc", "password": SECRET}
        client_auth = {"user": "cc", "password": SECRET}
    elif variant == "nkey":
        auth, seed = nkey_setup(srv_dir)
        opts = {"nkey_seed_file": str(seed)}
        client_auth = {"nkeys_seed": str(seed)}
    elif variant == "creds":
        auth, creds = operator_setup(srv_dir)
        opts = {"creds_file": str(creds)}
        jetstream = False  # operator mode: JetStream needs account limits; core suffices
    else:
        files = tls_setup(srv_dir)
        auth = (f'tls {{ cert_file: "{files["server.pem"]}", key_file: "{files["server.key"]}",'
                f' ca_file: "{files["ca.pem"]}", verify: true }}')
        opts = {"tls_ca_file": str(files["ca.pem"]), "tls_cert_file": str(files["client.pem"]),
                "tls_key_file": str(files["client.key"])}
        url_scheme = "tls"
        jetstream = False
    with NatsServer(srv_dir, auth=auth, jetstream=jetstream) as server:
        url = server.url.replace("nats://", f"{url_scheme}://")
        if jetstream:
            add_stream(url, **client_auth)
        pub = NatsPublisher(NatsOptions(url=url, jetstream=jetstream,
                                        publish_timeout=3.0, reconnect_wait=0.5, **opts))
        pub.start()
        wait_connected(pub)
        box, d = nats_only(tmp_path, pub)
        box.enqueue(job_events(2))
        assert drain(d, 4) == 4
        if jetstream:
            assert len(stream_messages(url, **client_auth)) == 4
        d.close()
        pub.close()
        box.close()


def test_wrong_password_is_a_clear_error_not_a_crash_loop(tmp_path, caplog):
    auth = f'authorization {{ users = [ {{ user: cc, password: "{SECRET}" }} ] }}'
    with NatsServer(tmp_path / "srv", auth=auth, jetstream=False) as server:
        caplog.set_level(logging.INFO)
        pub = publisher(server, jetstream=False, user="cc", password="wrong-" + SECRET)
        box, d = nats_only(tmp_path, pub)
        box.enqueue(job_events(1))
        until = time.time() + 6
        while time.time() < until:
            assert d.run_once().delivered == 0
            time.sleep(0.5)
        refusals = [r for r in caplog.records if "refused our credentials" in r.getMessage()]
        assert refusals and "natsUser/natsPassword" in refusals[0].getMessage()
        assert len(refusals) <= 2  # said once (per minute), not once per retry
        assert all(SECRET not in r.getMessage() for r in caplog.records)
        assert admin.stats(box.store)["pending"] == 2  # kept for later
        d.close()
        pub.close()  # and it shuts down cleanly
        box.close()
