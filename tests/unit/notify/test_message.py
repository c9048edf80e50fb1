"""The NATS message cc-backend consumes: line protocol around the REST body's JSON."""

import json

import pytest

from ccadapter.notify.lineproto import LineProtocolError, encode_line
from ccadapter.notify.message import job_message, msg_id, nodestate_message
from ccadapter.notify.nats_delivery import Subjects, event_message
from ccadapter.outbox import Event
from tests.lineproto import ParseError, parse_line
from tests.standin.ccbackend import (
    JOB,
    NODESTATE_REQUEST,
    STOP_REQUEST,
    BadRequest,
    decode_body,
)

SUBJECTS = Subjects("cc.job.event", "cc.node.state")

NASTY = '#!/bin/sh\necho "a, b" \\ c=d\ttab\n# ünïcode, \\"quoted\\"\r\nexit 0\n'


def start_body(script: str = NASTY) -> dict:
    return {"jobId": 7, "cluster": "c 1", "user": "u", "project": "p", "startTime": 1_700_000_000,
            "numNodes": 1, "numHwthreads": 2, "partition": "big, fast",
            "resources": [{"hostname": "n1", "hwthreads": [0, 1]}],
            "metaData": {"jobScript": script, "jobName": 'x "y" z'}}


def stop_body() -> dict:
    return {"jobId": 7, "cluster": "c 1", "startTime": 1_700_000_000,
            "stopTime": 1_700_000_100, "jobState": "completed"}


def test_start_round_trips_a_script_with_every_special_character():
    msg = job_message("start", start_body(), "ctl-01", "cc.job.event")
    text = msg.data.decode()
    assert "\n" not in text
    point = parse_line(text)
    assert point.measurement == "job"
    assert point.tags == {"function": "start_job", "hostname": "ctl-01", "type": "node",
                          "type-id": "0"}
    assert point.timestamp == 1_700_000_000 * 10**9
    assert list(point.fields) == ["event"]
    body = json.loads(point.fields["event"])
    assert body == start_body()
    assert body["metaData"]["jobScript"] == NASTY
    decode_body(body, None, JOB)  # as strict as cc-backend's REST decoding
    assert msg.msg_id == "c 1/7/1700000000/start"
    assert msg.subject == "cc.job.event"


def test_stop_carries_partition_tag_and_stop_time():
    ev = Event(1, "c 1", 7, 1_700_000_000, "stop", {"stop": stop_body(), "start": start_body()},
               0, 0.0)
    msg = event_message(ev, "ctl", SUBJECTS)
    assert msg.subject == "cc.job.event"
    point = parse_line(msg.data.decode())
    assert point.tags["function"] == "stop_job"
    assert point.tags["partition"] == "big, fast"  # escaped comma and space survive
    assert point.timestamp == 1_700_000_100 * 10**9
    body = json.loads(point.fields["event"])
    assert body == stop_body()
    decode_body(body, None, STOP_REQUEST)


def test_stop_without_known_start_has_no_partition_tag():
    ev = Event(1, "c", 7, 1, "stop", {"stop": {**stop_body(), "cluster": "c"}}, 0, 0.0)
    assert "partition" not in parse_line(event_message(ev, "ctl", SUBJECTS).data.decode()).tags


def test_msg_id_is_the_outbox_identity():
    assert msg_id("c", 1, 2, "stop") == msg_id("c", 1, 2, "stop") != msg_id("c", 1, 2, "start")


@pytest.mark.parametrize("bad", ["a\nb", "a\\b", ""])
def test_tags_that_line_protocol_cannot_carry_are_refused(bad):
    with pytest.raises(LineProtocolError):
        encode_line("job", {"hostname": bad}, {"event": "{}"}, 0)


def test_string_field_escaping():
    line = encode_line("m,x y", {"k=1": "v w,z"}, {"f": 'a"b\\c'}, 5)
    assert line == 'm\\,x\\ y,k\\=1=v\\ w\\,z f="a\\"b\\\\c" 5'
    p = parse_line(line)
    assert (p.measurement, p.tags, p.fields, p.timestamp) == (
        "m,x y", {"k=1": "v w,z"}, {"f": 'a"b\\c'}, 5)
    with pytest.raises(LineProtocolError):
        encode_line("m", {}, {"f": "raw\nnewline"}, 5)


def test_reader_is_strict():
    for bad in ['job event="x" 1\njob event="y" 2', 'job event="x', 'job,t= event="x" 1',
                'job event="x" 1.5', "job 1"]:
        with pytest.raises(ParseError):
            parse_line(bad)


def nodestate_body() -> dict:
    return {"cluster": "c 1", "nodes": [
        {"hostname": "n1", "states": ["allocated", "planned"], "cpusAllocated": 4,
         "memoryAllocated": 2000, "gpusAllocated": 1, "jobsRunning": 2},
        {"hostname": "n2", "states": ["idle"], "cpusAllocated": 0, "memoryAllocated": 0,
         "gpusAllocated": 0, "jobsRunning": 0}]}


def test_nodestate_is_the_line_cc_backend_reads_on_its_node_state_subject():
    """cc-backend v1.5.4 internal/api/nats.go:524-549: the measurement must be
    ``nodestate`` (an other name is logged and dropped, :544-547), the ``event`` field a
    string (``IsEvent``, :539), no tag is read; :428-432 decode the event with
    DisallowUnknownFields into UpdateNodeStatesRequest (internal/api/node.go:23-26)."""
    msg = nodestate_message(nodestate_body(), 1_700_000_060, "cc.node.state")
    assert msg.subject == "cc.node.state"
    assert msg.msg_id == "c 1/0/1700000060/nodestate"
    text = msg.data.decode()
    assert "\n" not in text and text.startswith('nodestate event="{')
    point = parse_line(text)
    assert (point.measurement, point.tags, list(point.fields)) == ("nodestate", {}, ["event"])
    assert point.timestamp == 1_700_000_060 * 10**9  # ccMessage.NewMessage refuses time 0
    body = json.loads(point.fields["event"])
    assert body == nodestate_body()
    decode_body(body, None, NODESTATE_REQUEST)  # as strict as cc-backend's decoding


def test_the_strict_decoding_would_refuse_a_field_cc_backend_does_not_know():
    body = nodestate_body()
    body["nodes"][0]["healthState"] = "full"  # a NodeStateDB field, not a NodePayload one
    point = parse_line(nodestate_message(body, 5, "s").data.decode())
    with pytest.raises(BadRequest, match="unknown field"):
        decode_body(json.loads(point.fields["event"]), None, NODESTATE_REQUEST)


def test_event_message_puts_each_kind_on_its_subject():
    nodestate = Event(3, "c 1", 0, 1_700_000_060, "nodestate", nodestate_body(), 0, 0.0)
    start = Event(1, "c 1", 7, 1_700_000_000, "start", start_body(), 0, 0.0)
    assert event_message(nodestate, "ctl", SUBJECTS).subject == "cc.node.state"
    assert event_message(start, "ctl", SUBJECTS).subject == "cc.job.event"
    assert parse_line(event_message(nodestate, "ctl", SUBJECTS).data.decode()).timestamp \
        == 1_700_000_060 * 10**9
    with pytest.raises(ValueError, match="natsNodeStateSubject is empty"):
        event_message(nodestate, "ctl", Subjects("cc.job.event"))
    with pytest.raises(ValueError, match="no NATS form"):
        event_message(Event(4, "c", 7, 1, "bogus", {}, 0, 0.0), "ctl", SUBJECTS)


def test_a_start_is_published_in_cc_backends_numbering():
    """Issue 45: NATS-only sites get the same mapping as REST (ccClusterJson)."""
    from ccadapter.notify.message import Published
    from ccadapter.notify.nats_delivery import NatsDelivery

    sent = []

    class Capture:
        def publish(self, msg):
            sent.append(msg)
            return Published(ok=True)

    def renumber(body):
        return {**body, "resources": [{"hostname": "n1", "hwthreads": [0, 8]}]}

    start = Event(1, "c 1", 7, 1_700_000_000, "start", start_body(), 0, 0.0)
    stop = Event(2, "c 1", 7, 1_700_000_000, "stop", {"stop": stop_body()}, 0, 0.0)
    delivery = NatsDelivery(Capture(), "ctl", SUBJECTS, renumber=renumber)
    assert delivery(start).status == "delivered" and delivery(stop).status == "delivered"
    line = parse_line(sent[0].data.decode())
    assert json.loads(line.fields["event"])["resources"] == [{"hostname": "n1",
                                                              "hwthreads": [0, 8]}]
    assert start.payload["resources"][0]["hwthreads"] == [0, 1]
