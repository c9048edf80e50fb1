"""The fault proxy the integration suites put in front of the real cc-backend
(tests/faultproxy.py), here in front of the stand-in: it forwards what it does not fail, and
its log says what passed and what came back."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from tests.ccbackend import Nodes, scheduler_state
from tests.ccbackend_site import cluster_json
from tests.faultproxy import FaultProxy
from tests.standin.ccbackend import CcBackendStandin

TOKEN = "proxy-test-token"
START = "/api/jobs/start_job/"


def job(job_id: int) -> dict:
    return {"jobId": job_id, "cluster": "c", "user": "u", "project": "p", "numNodes": 1,
            "numHwthreads": 1, "startTime": 1_700_000_000, "shared": "none",
            "resources": [{"hostname": "n1"}]}


@pytest.fixture
def proxy():
    with CcBackendStandin(TOKEN, clusters=["c"]) as standin:
        p = FaultProxy(standin.url).start()
        try:
            yield p, standin
        finally:
            p.stop()


def post(url: str, path: str, body: dict, timeout: float = 10) -> int:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {TOKEN}",
                                                       "Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_forwards_and_logs(proxy):
    p, standin = proxy
    assert post(p.url, START, job(1)) == 201
    assert post(p.url, START, job(1)) in (422, 500)  # the upstream's own answer
    assert [(e.method, e.path, e.body["jobId"]) for e in p.requests()] == [
        ("POST", START, 1), ("POST", START, 1)]
    assert p.count(START, 201) == 1 and standin.count(START) == 2


def test_fail_with_answers_in_the_servers_place(proxy):
    p, standin = proxy
    p.fail_with(503)
    assert post(p.url, START, job(2)) == 503
    p.fail_with(None)
    assert post(p.url, START, job(2)) == 201
    assert [e.status for e in p.requests()] == [503, 201]
    assert standin.count(START) == 1  # the 503 never reached it


def test_fail_path_answers_one_path_and_forwards_the_rest(proxy):
    p, standin = proxy
    p.fail_path(START, 500, {"error": "open meta.json: no such file or directory"})
    assert post(p.url, START, job(3)) == 500
    assert post(p.url, "/api/jobs/stop_job/", {"jobId": 3, "cluster": "c",
                                                "startTime": 1_700_000_000,
                                                "stopTime": 1_700_000_060}) == 404
    p.fail_path(START, None)
    assert post(p.url, START, job(3)) == 201
    assert standin.count(START) == 1 and standin.count("/api/jobs/stop_job/") == 1


def test_drop_and_hang(proxy):
    p, standin = proxy
    p.drop_connections(True)
    with pytest.raises((http.client.HTTPException, OSError)):
        post(p.url, START, job(3))
    p.drop_connections(False)
    p.hang(3600)
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(post(p.url, START, job(3), 30)))
    thread.start()
    time.sleep(0.5)
    assert answers == []  # held
    p.hang(None)
    thread.join(10)
    assert answers == [201]
    assert [e.status for e in p.requests()] == [0, 201] and standin.count(START) == 1


def test_a_request_cut_before_its_body_is_not_forwarded(proxy):
    """A sender killed between its headers and its body (the resilience run SIGKILLs the
    daemon while it delivers) must not reach cc-backend as an empty body, which it answers
    400: the suites count a 400 as a body the daemon built wrong."""
    p, standin = proxy
    host, port = p.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST {START} HTTP/1.1\r\nHost: x\r\nContent-Length: 120\r\n"
                     f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == b""  # closed without an answer
    deadline = time.time() + 5
    while not p.requests() and time.time() < deadline:
        time.sleep(0.01)
    assert [(e.path, e.status) for e in p.requests()] == [(START, 0)]
    assert standin.count(START) == 0


def test_scheduler_state_follows_cc_backends_rules():
    """internal/api/node.go determineState, in its order."""
    assert scheduler_state("ALLOCATED") == "allocated"
    assert scheduler_state("MIXED+DRAIN") == "mixed"
    assert scheduler_state("IDLE+DRAIN") == "idle"
    assert scheduler_state("IDLE+DOWN") == "down"
    assert scheduler_state("DOWN+NOT_RESPONDING") == "down"
    assert scheduler_state("DRAINED") == "unknown"
    assert scheduler_state("RESERVED+IDLE") == "reserved"


def test_cluster_json_names_every_node_in_a_subcluster_of_its_kind():
    doc = cluster_json("c", Nodes(("n1", "n2", "n3"), ("n1",)))
    assert [(s["name"], s["nodes"], len(s["topology"].get("accelerators", [])))
            for s in doc["subClusters"]] == [("gpu", "n1", 2), ("main", "n2,n3", 0)]
    assert "*" not in json.dumps(doc)
