"""gateway.protocol.parser: SSE bytes split anywhere, and the spec's "Unknown frames and keys"."""

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol import events as ev
from gateway.protocol import sse, states
from gateway.protocol.parser import KNOWN_FRAMES, SSEEvent, SSEParser, StreamItem, read_stream_response
from gateway.protocol.uris import STREAM_URI

pytestmark = pytest.mark.unit

TASK_ID = "tsk_0199c4e2f1b7712a9d3e4f5061728394"
CONTEXT_ID = "ctx_0199c4e2f1b7712a9d3e4f50617283a1"
TS = "2026-10-13T09:00:00.123Z"


def build_wire() -> bytes:
    """A WatchSession-like stream: ack, heartbeat, numbered frames with non-ASCII text, a status."""
    rpc = orjson.dumps(1)
    status = ev.task_status(states.WORKING, TS, states.inference_turn(1), task_id=TASK_ID, context_id=CONTEXT_ID)
    return b"".join([
        sse.frame_event(None, rpc, orjson.dumps(ev.taskless_frame_event(ev.connection_ack_frame("threaded")))),
        sse.HEARTBEAT,
        sse.frame_event(1, rpc, orjson.dumps(ev.status_update(TASK_ID, CONTEXT_ID, status))),
        sse.frame_event(2, rpc, orjson.dumps(ev.task_frame_event(TASK_ID, CONTEXT_ID,
                                                                 ev.text_frame("héllo — ✓ 🚀", False), ts=TS))),
        sse.HEARTBEAT,
    ])


WIRE = build_wire()


def parse_chunks(chunks) -> list[SSEEvent]:
    parser = SSEParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_wire_parses_into_events_and_heartbeats():
    events = parse_chunks([WIRE])
    assert [(e.id, e.data is None, e.comments) for e in events] == [
        (None, False, ()), (None, True, ("heartbeat",)), (1, False, ()), (2, False, ()), (None, True, ("heartbeat",)),
    ]
    _, item, _ = read_stream_response(events[3].data)
    assert item.frame == {"frame": "text", "text": "héllo — ✓ 🚀", "final": False}


def test_every_single_split_point_gives_the_same_events():
    data = WIRE
    whole = parse_chunks([data])
    for cut in range(len(data) + 1):
        assert parse_chunks([data[:cut], data[cut:]]) == whole, cut


@given(st.data())
def test_any_split_into_many_chunks_gives_the_same_events(draw):
    data = WIRE.replace(b"\n", b"\r\n") if draw.draw(st.booleans()) else WIRE
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=30)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    assert parse_chunks(chunks) == parse_chunks([WIRE])


def test_byte_at_a_time():
    data = WIRE
    assert parse_chunks([data[i:i + 1] for i in range(len(data))]) == parse_chunks([data])


def test_sse_field_rules():
    parser = SSEParser()
    assert parser.feed(b"id:5\ndata:no-space\n\n") == [SSEEvent(5, "no-space", ())]
    assert parser.feed(b"data:  two spaces\n\n") == [SSEEvent(None, " two spaces", ())]
    assert parser.feed(b"event: x\nretry: 10\nunknown\ndata: a\ndata: b\n\n") == [SSEEvent(None, "a\nb", ())]
    assert parser.feed(b"id: abc\ndata\n\n") == [SSEEvent(None, "", ())]
    assert parser.feed(b"\n\n\n") == []
    assert parser.feed(b": spaced comment\ndata: x") == []  # not dispatched before the blank line
    assert parser.feed(b"\n\n") == [SSEEvent(None, "x", (" spaced comment",))]


def test_read_stream_response_known_members():
    for result, kind in [
        (ev.task_event(ev.task(TASK_ID, CONTEXT_ID, {"state": states.SUBMITTED, "timestamp": TS})), "task"),
        (ev.artifact_update(TASK_ID, CONTEXT_ID, ev.response_artifact("x")), "artifactUpdate"),
        (ev.taskless_frame_event(ev.gap_frame(37)), "message"),
        (ev.task_frame_event(TASK_ID, CONTEXT_ID, ev.lagged_frame(40)), "statusUpdate"),
    ]:
        rpc_id, item, error = read_stream_response(sse.json_rpc_result("r1", result))
        assert (rpc_id, error) == ("r1", None)
        assert item.kind == kind and item.body == result[kind]
        assert item.frame == (result[kind].get("metadata") or {}).get(STREAM_URI)
        assert item.reopen is None


def test_read_stream_response_reopen_annotation():
    status = ev.task_status(states.WORKING, TS, states.reopened_by_hook("h"), task_id=TASK_ID, context_id=CONTEXT_ID)
    activated, plain = ev.reopen_status_update(TASK_ID, CONTEXT_ID, status, 2)
    assert read_stream_response(orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": activated}))[1].reopen == 2
    item = read_stream_response(orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": plain}))[1]
    assert (item.frame, item.reopen) == (None, None)


def test_unknown_members_frames_and_keys_are_tolerated():
    unknown_member = {"jsonrpc": "2.0", "id": 1, "result": {"somethingNew": {"x": 1}}, "extra": True}
    assert read_stream_response(orjson.dumps(unknown_member)) == (1, None, None)
    both = {"jsonrpc": "2.0", "id": 1,
            "result": {"somethingNew": {}, "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}}}
    assert read_stream_response(orjson.dumps(both))[1].kind == "message"
    future = ev.taskless_frame_event({"frame": "hologram", "depth": 3})
    future["message"]["newKey"] = {"nested": [1, {"deeper": None}]}
    _, item, _ = read_stream_response(sse.json_rpc_result(1, future))
    assert item.frame["frame"] == "hologram" and "hologram" not in KNOWN_FRAMES
    assert item.body["newKey"] == {"nested": [1, {"deeper": None}]}


def test_known_frames_are_every_frame_the_spec_names():
    assert KNOWN_FRAMES == set(ev.PROCESS_FRAME_NAMES)


def test_read_stream_response_error():
    body = b'{"jsonrpc":"2.0","id":"r1","error":{"code":-32001,"message":"task not found"}}'
    assert read_stream_response(body) == ("r1", None, {"code": -32001, "message": "task not found"})


@pytest.mark.parametrize("data", [b"not json", b"[1,2]", '"a string"'])
def test_read_stream_response_rejects_non_objects(data):
    with pytest.raises(ValueError):
        read_stream_response(data)


def test_stream_item_is_a_named_tuple():
    assert StreamItem._fields == ("kind", "body", "frame", "reopen")
