"""The NATS message cc-backend consumes: line protocol around the REST body's JSON."""

import json

import pytest

from ccadapter.notify.delivery import event_message
from ccadapter.notify.lineproto import LineProtocolError, encode_line
from ccadapter.notify.message import job_message, msg_id
from ccadapter.outbox import Event
from tests.lineproto import ParseError, parse_line
from tests.standin.ccbackend import JOB, STOP_REQUEST, decode_body

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
    msg = job_message("start", start_body(), "ctl-01")
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


def test_stop_carries_partition_tag_and_stop_time():
    ev = Event(1, "c 1", 7, 1_700_000_000, "stop", {"stop": stop_body(), "start": start_body()},
               0, 0.0)
    point = parse_line(event_message(ev, "ctl").data.decode())
    assert point.tags["function"] == "stop_job"
    assert point.tags["partition"] == "big, fast"  # escaped comma and space survive
    assert point.timestamp == 1_700_000_100 * 10**9
    body = json.loads(point.fields["event"])
    assert body == stop_body()
    decode_body(body, None, STOP_REQUEST)


def test_stop_without_known_start_has_no_partition_tag():
    ev = Event(1, "c", 7, 1, "stop", {"stop": {**stop_body(), "cluster": "c"}}, 0, 0.0)
    assert "partition" not in parse_line(event_message(ev, "ctl").data.decode()).tags


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
