"""The REST client's answer table, on requests: cc-backend's answers simulated with
``responses``, and a tiny real HTTP server on 127.0.0.1 for what ``responses`` cannot
simulate (a kept-alive connection the server closes, TLS, refused connections)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import responses

from ccadapter.cc.client import CcBackendError, CcClient, Outcome
from ccadapter.cc.http import HttpSession, TransportError, system_ca
from ccadapter.retry import RetryPolicy

URL = "http://cc.example.org:8080"
TOKEN = "jwt-secret-0123456789abcdef"
START, STOP, NODESTATE = ("/api/jobs/start_job/", "/api/jobs/stop_job/", "/api/nodestate/")
BODY = {"jobId": 1, "cluster": "c", "startTime": 1_700_000_000, "user": "ü"}


@pytest.fixture
def calls() -> list[tuple[str, int, float]]:
    return []


@pytest.fixture
def client(calls) -> Iterator[CcClient]:
    c = CcClient(URL, TOKEN, on_request=lambda *call: calls.append(call))
    yield c
    c.close()


def answer(path: str, *statuses: int) -> None:
    """cc-backend answers these statuses to POSTs on ``path``, in order."""
    for status in statuses:
        responses.post(URL + path, status=status, json={"status": "x", "error": f"e{status}"})


@responses.activate
@pytest.mark.parametrize(("kind", "path", "status", "outcome"), [
    ("start", START, 201, Outcome.DELIVERED),
    ("start", START, 422, Outcome.DELIVERED),  # already there
    ("stop", STOP, 200, Outcome.DELIVERED),
    ("stop", STOP, 422, Outcome.DELIVERED),  # already stopped
    ("stop", STOP, 404, Outcome.NEEDS_START),  # cc-backend never saw the start
    ("start", START, 400, Outcome.REJECTED),
    ("stop", STOP, 400, Outcome.REJECTED),
    ("start", START, 401, Outcome.AUTH),
    ("stop", STOP, 403, Outcome.AUTH),
    ("nodestate", NODESTATE, 200, Outcome.DELIVERED),
])
def test_answers(client, calls, kind, path, status, outcome):
    answer(path, status)
    got = client.send(kind, BODY)
    assert (got.outcome, got.status) == (outcome, status)
    assert f"e{status}" in got.detail
    (req,) = [c.request for c in responses.calls]
    assert req.headers["X-Auth-Token"] == TOKEN
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == json.dumps(BODY, separators=(",", ":"), ensure_ascii=False).encode()
    assert [(e, s) for e, s, _ in calls] == [(path, status)]


@responses.activate
def test_5xx_is_retried_quickly_then_left_to_the_outbox(client, calls, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)  # tenacity's jittered waits
    answer(START, 503, 502, 500)
    got = client.send("start", BODY)
    assert (got.outcome, got.status) == (Outcome.RETRY, 500)
    assert [s for _, s, _ in calls] == [503, 502, 500]  # 1 + 2 quick retries
    answer(START, 503, 201)
    assert client.send("start", BODY).outcome is Outcome.DELIVERED  # a blip absorbed


@responses.activate
@pytest.mark.parametrize(("error", "detail"), [
    (requests.exceptions.ConnectTimeout(), "no connection within 5 s"),
    (requests.exceptions.ReadTimeout(), "no answer within 30 s"),
    (requests.exceptions.ConnectionError(ConnectionRefusedError(111, "refused")),
     "connection refused"),
])
def test_no_answer_is_retried_later_not_now(client, calls, error, detail):
    responses.post(URL + START, body=error)
    got = client.send("start", BODY)
    assert (got.outcome, got.status, got.detail) == (Outcome.RETRY, 0, detail)
    assert len(responses.calls) == 1  # no quick retry without an answer
    assert [s for _, s, _ in calls] == [0]


@responses.activate
def test_running_jobs_errors_never_read_as_no_jobs(client):
    responses.get(URL + "/api/jobs/", json={"jobs": [{"jobId": 1, "startTime": 5}]})
    assert client.running_jobs("c") == [{"jobId": 1, "startTime": 5}]
    assert responses.calls[0].request.params == {"state": "running", "cluster": "c",
                                                  "items-per-page": "500", "page": "1"}
    responses.replace(responses.GET, URL + "/api/jobs/", status=401, body="no token")
    with pytest.raises(CcBackendError, match="HTTP 401"):
        client.running_jobs("c")
    responses.replace(responses.GET, URL + "/api/jobs/", body="<html>")
    with pytest.raises(CcBackendError, match="not a job list"):
        client.running_jobs("c")


@responses.activate
def test_the_token_never_shows(client):
    responses.post(URL + START, body=requests.exceptions.ConnectionError(
        f"HTTPConnectionPool: headers {{'X-Auth-Token': '{TOKEN}'}}"))
    got = client.send("start", BODY)
    assert TOKEN not in got.detail and TOKEN not in repr(client)
    assert TOKEN not in repr(client._http)


# --- a real server on 127.0.0.1 ----------------------------------------------------------------

class KeepAliveServer(ThreadingHTTPServer):
    """Answers start_job like cc-backend (201 first, 422 for a job it has); with
    ``close_second`` it takes the second request of every connection, stores the job, and
    closes the connection without answering -- a kept-alive connection closed by the server
    just as the client reused it."""

    daemon_threads = True

    def __init__(self, close_second: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.close_second = close_second
        self.seen: list[tuple[int, dict]] = []  # (client port, body) per request read
        self.jobs: set[int] = set()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def setup(self) -> None:
        super().setup()
        self.count = 0

    def do_POST(self) -> None:
        server: KeepAliveServer = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.count += 1
        server.seen.append((self.client_address[1], body))
        status = 422 if body["jobId"] in server.jobs else 201
        server.jobs.add(body["jobId"])
        if server.close_second and self.count == 2:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # no answer at all
            return
        data = b'{"msg":"success"}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_a_kept_alive_connection_closed_by_the_server_is_resent_once_harmlessly(calls):
    server = KeepAliveServer(close_second=True)
    client = CcClient(server.url, TOKEN, pool_size=1, on_request=lambda *c: calls.append(c))
    try:
        first = client.send("start", {**BODY, "jobId": 1})
        second = client.send("start", {**BODY, "jobId": 2})  # reuses the connection
    finally:
        client.close()
        server.stop()
    assert (first.outcome, first.status) == (Outcome.DELIVERED, 201)
    # the server stored job 2, then closed the connection; the resend on a fresh connection
    # is answered 422 (already there), which counts as delivered: nothing sent twice for good
    assert (second.outcome, second.status) == (Outcome.DELIVERED, 422)
    ports = [port for port, _ in server.seen]
    assert [b["jobId"] for _, b in server.seen] == [1, 2, 2]
    assert ports[0] == ports[1] != ports[2]  # the resend went over a new connection
    assert server.jobs == {1, 2}
    assert [s for _, s, _ in calls] == [201, 422]  # one exchange each for the metrics


def test_keep_alive_reuses_one_connection(calls):
    server = KeepAliveServer()
    client = CcClient(server.url, TOKEN, pool_size=2)
    try:
        assert [client.send("start", {**BODY, "jobId": j}).status for j in (1, 2, 3)] == \
            [201, 201, 201]
    finally:
        client.close()
        server.stop()
    assert len({port for port, _ in server.seen}) == 1


def test_the_pool_is_found_once_per_origin(monkeypatch):
    """requests looks up the connection pool for every request (8 % of a delivery's CPU);
    ours does it once for the origin, and sends as before."""
    from requests.adapters import HTTPAdapter

    server = KeepAliveServer()
    client = CcClient(server.url, TOKEN, pool_size=2)
    found = []
    lookup = HTTPAdapter.get_connection_with_tls_context
    monkeypatch.setattr(HTTPAdapter, "get_connection_with_tls_context",
                        lambda self, *a, **k: found.append(1) or lookup(self, *a, **k))
    try:
        statuses = [client.send(kind, {**BODY, "jobId": 1}).status
                    for kind in ("start", "start", "start")]
    finally:
        client.close()
        server.stop()
    assert statuses == [201, 422, 422]
    assert len(found) == 1
    assert len({port for port, _ in server.seen}) == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection():
    client = CcClient(f"http://127.0.0.1:{free_port()}", TOKEN, retry=RetryPolicy(attempts=1))
    got = client.send("start", BODY)
    client.close()
    assert (got.outcome, got.status, got.detail) == (Outcome.RETRY, 0, "connection refused")


def test_read_timeout_is_not_resent():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts (the kernel does) and never answers
    session = HttpSession(f"http://127.0.0.1:{listener.getsockname()[1]}", {}, pool_size=1,
                          connect_timeout=1, read_timeout=0.3)
    try:
        with pytest.raises(TransportError, match=r"no answer within 0\.3 s") as err:
            session.post(START, b"{}")
        assert err.value.kind == "timeout"
        conns = []
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            while True:
                conns.append(listener.accept()[0])
        assert len(conns) == 1  # one attempt, not two
    finally:
        session.close()
        for c in conns:
            c.close()
        listener.close()


# --- TLS and the environment ------------------------------------------------------------------

def self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[tuple[str, Path, Path]]:
    """An HTTPS server with a self-signed certificate for 127.0.0.1: its URL, its
    certificate, and another certificate that does not sign it."""
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(tmp, "server")
    other, _ = self_signed(tmp, "other")
    server = KeepAliveServer()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    yield server.url.replace("http://", "https://"), cert, other
    server.stop()


@pytest.fixture
def no_ca_env(monkeypatch):
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


def test_tls_is_verified_with_the_configured_bundle(tls_server, no_ca_env):
    url, cert, other = tls_server
    for bundle in (None, str(other)):  # the system store, a bundle of someone else
        untrusted = CcClient(url, TOKEN, ca_bundle=bundle, retry=RetryPolicy(attempts=1))
        got = untrusted.send("start", {**BODY, "jobId": 10})
        untrusted.close()
        assert got.status == 0 and got.detail.startswith("TLS: certificate not trusted")
    trusted = CcClient(url, TOKEN, ca_bundle=str(cert))
    assert trusted.send("start", {**BODY, "jobId": 11}).status == 201
    trusted.close()


def test_requests_ca_bundle_when_no_bundle_is_configured(tls_server, monkeypatch):
    url, cert, other = tls_server
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    client = CcClient(url, TOKEN)
    assert client.send("start", {**BODY, "jobId": 12}).status == 201
    client.close()
    client = CcClient(url, TOKEN, ca_bundle=str(other),  # the key wins
                      retry=RetryPolicy(attempts=1))
    got = client.send("start", {**BODY, "jobId": 13})
    client.close()
    assert got.detail.startswith("TLS: certificate not trusted")


def test_the_system_store_is_the_default(no_ca_env):
    session = HttpSession("https://cc.example.org", {}, pool_size=1, connect_timeout=1,
                          read_timeout=1)
    assert session._verify == system_ca() == ssl.get_default_verify_paths().cafile
    session.close()


def test_plain_http_on_an_https_url_is_a_tls_error():
    server = KeepAliveServer()
    client = CcClient(server.url.replace("http://", "https://"), TOKEN,
                      retry=RetryPolicy(attempts=1))
    got = client.send("start", BODY)
    client.close()
    server.stop()
    assert got.status == 0 and got.detail.startswith("TLS handshake failed")


def test_proxies_come_from_the_environment(monkeypatch):
    server = KeepAliveServer()  # plays the proxy: an absolute URL in the request line
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = CcClient("http://cc.invalid:8080", TOKEN)
    assert client.send("start", {**BODY, "jobId": 20}).status == 201
    client.close()
    monkeypatch.setenv("NO_PROXY", "cc.invalid")
    client = CcClient("http://cc.invalid:8080", TOKEN, retry=RetryPolicy(attempts=1))
    got = client.send("start", {**BODY, "jobId": 21})
    client.close()
    server.stop()
    assert got.detail == "host name not found"  # bypassing the proxy: straight to DNS
    assert [b["jobId"] for _, b in server.seen] == [20]


@responses.activate
@pytest.mark.parametrize("entry", [{"jobId": "12a", "startTime": 5}, {"jobId": 12},
                                   {"jobId": True, "startTime": 5}, ["12", 5], None])
def test_a_malformed_job_entry_is_one_error_naming_it(client, entry):
    """Issue 29: cc-cache read ``int(j["jobId"])`` from cc-backend's answer unchecked, so a
    malformed entry ended the cycle with a traceback. Now one CcBackendError line names it."""
    responses.get(URL + "/api/jobs/", json={"jobs": [{"jobId": 1, "startTime": 5}, entry]})
    with pytest.raises(CcBackendError) as err:
        list(client.running_runs("c"))
    assert "GET /api/jobs/ page 1: an entry without an integer jobId and startTime" in \
        str(err.value) and "\n" not in str(err.value)
    responses.replace(responses.GET, URL + "/api/jobs/",
                      json={"jobs": [{"jobId": 1, "startTime": 5}]})
    assert list(client.running_runs("c")) == [(1, 5)]


@responses.activate
def test_a_jobs_lookup_is_timed_under_one_endpoint_not_one_per_job(client, calls):
    """Fails on 77639ec: each GET /api/jobs/{id} (a requeued run's 422 names the job it
    holds) was timed under its own path, a metrics label per job for the daemon's life."""
    for db_id in (17, 18):
        responses.get(f"{URL}/api/jobs/{db_id}", status=200,
                      json={"Meta": {"startTime": 1_700_000_000 + db_id}})
    assert [client.job_start(17), client.job_start(18)] == [1_700_000_017, 1_700_000_018]
    responses.get(URL + "/api/jobs/", json={"jobs": []})
    assert client.listed_runs("c", (1, 2)) == {}
    assert [c[0] for c in calls] == ["/api/jobs/{id}", "/api/jobs/{id}", "/api/jobs/"]


@responses.activate
def test_delete_run_sends_the_run_and_reads_the_answer(client):
    """A run held with another's stop is deleted by jobId, cluster and startTime
    (cc-backend 1.5.4 deleteJobByRequest); "no such job" (422) counts as deleted."""
    responses.delete(URL + "/api/jobs/delete_job/", json={"msg": "Successfully deleted job 9"})
    responses.delete(URL + "/api/jobs/delete_job/", status=422,
                     json={"status": "x", "error": "finding job failed"})
    responses.delete(URL + "/api/jobs/delete_job/", status=503, body="down")
    got = [client.delete_run("c", 7, 1_700_000_000) for _ in range(3)]
    assert [a.outcome for a in got] == [Outcome.DELIVERED, Outcome.DELIVERED, Outcome.RETRY]
    assert json.loads(responses.calls[0].request.body) == {
        "jobId": 7, "cluster": "c", "startTime": 1_700_000_000}
    assert responses.calls[0].request.headers["X-Auth-Token"] == TOKEN
