"""Delivery through the real client against HTTP answers mocked with `responses`."""

import pytest
import requests
import responses

from ccadapter.cc.client import CcClient, Outcome, classify
from ccadapter.delivery import Deliverer
from ccadapter.outbox import NewEvent, Outbox

URL = "http://127.0.0.1:9"
START_URL, STOP_URL = URL + "/api/jobs/start_job/", URL + "/api/jobs/stop_job/"


@pytest.mark.parametrize(("kind", "status", "outcome"), [
    ("start", 201, Outcome.DELIVERED), ("start", 422, Outcome.DELIVERED),
    ("stop", 200, Outcome.DELIVERED), ("stop", 422, Outcome.DELIVERED),
    ("stop", 404, Outcome.NEEDS_START), ("start", 404, Outcome.REJECTED),
    ("start", 400, Outcome.REJECTED), ("start", 401, Outcome.AUTH),
    ("stop", 403, Outcome.AUTH), ("start", 503, Outcome.RETRY), ("start", 0, Outcome.RETRY),
    ("nodestate", 200, Outcome.DELIVERED), ("nodestate", 404, Outcome.REJECTED),
])
def test_classify(kind, status, outcome):
    assert classify(kind, status) is outcome


@pytest.fixture
def setup(tmp_path):
    box = Outbox(tmp_path / "o.sqlite")
    client = CcClient(URL, "secret-jwt-value", quick_retries=0)
    deliverer = Deliverer(box, client, workers=2)
    yield box, deliverer
    deliverer.close()
    client.close()
    box.close()


def events(job=1, t=100):
    return [NewEvent("c", job, t, "start", {"jobId": job, "startTime": t}),
            NewEvent("c", job, t, "stop", {"stop": {"jobId": job, "startTime": t},
                                           "start": {"jobId": job, "startTime": t}})]


@responses.activate
def test_start_then_stop(setup):
    box, d = setup
    responses.post(START_URL, status=201, json={"id": 1})
    responses.post(STOP_URL, status=200, json={})
    box.enqueue(events())
    stats = d.run_once()
    assert stats.delivered == 2
    assert [c.request.url for c in responses.calls] == [START_URL, STOP_URL]
    assert responses.calls[0].request.headers["X-Auth-Token"] == "secret-jwt-value"


@responses.activate
def test_stop_404_delivers_start_first(setup):
    box, d = setup
    box.enqueue(events()[1:])  # only the stop is queued (start long compacted)
    responses.post(STOP_URL, status=404)
    responses.post(START_URL, status=201)
    responses.post(STOP_URL, status=200)
    assert d.run_once().delivered == 1
    assert [c.request.url for c in responses.calls] == [STOP_URL, START_URL, STOP_URL]


@responses.activate
def test_stop_404_twice_is_rejected_not_looped(setup):
    box, d = setup
    box.enqueue(events()[1:])
    responses.post(STOP_URL, status=404)
    responses.post(START_URL, status=422)
    assert d.run_once().rejected == 1
    assert "even after its start was accepted" in box.rejected()[0]["error"]


@responses.activate
def test_bad_request_is_parked_with_body(setup):
    box, d = setup
    responses.post(START_URL, status=400, json={"error": "unknown field \"foo\""})
    box.enqueue(events()[:1])
    assert d.run_once().rejected == 1
    assert "unknown field" in box.rejected()[0]["error"]


@responses.activate
def test_outage_retries_later_and_secret_not_logged(setup, caplog):
    box, d = setup
    responses.post(START_URL, body=requests.ConnectionError("secret-jwt-value in error?"))
    box.enqueue(events()[:1])
    stats = d.run_once()
    assert stats.retried == 1 and stats.delivered == 0
    assert box.stats()["pending"] == 1
    assert "secret-jwt-value" not in caplog.text
    assert box.due() == []  # backoff


@responses.activate
def test_auth_error_said_plainly(setup, caplog):
    box, d = setup
    responses.post(START_URL, status=401)
    box.enqueue(events()[:1])
    d.run_once()
    assert "check ccRestJwt" in caplog.text and box.stats()["rejected"] == 0


@responses.activate
def test_running_jobs_pages_and_errors():
    client = CcClient(URL, "t")
    page = URL + "/api/jobs/"
    responses.get(page, json={"jobs": [{"jobId": i, "startTime": 1} for i in range(2)],
                              "items": 2, "page": 1})
    responses.get(page, json={"jobs": [{"jobId": 9, "startTime": 1}], "items": 1, "page": 2})
    assert [j["jobId"] for j in client.running_jobs("c", per_page=2)] == [0, 1, 9]
    responses.get(page, status=500)
    from ccadapter.cc.client import CcBackendError

    with pytest.raises(CcBackendError):
        client.running_jobs("c", per_page=2)
    client.close()
