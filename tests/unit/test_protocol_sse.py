"""gateway.protocol.sse: the event byte layout, checked against the spec's `id: 3` example."""

import pytest
import orjson

from gateway.protocol import events as ev
from gateway.protocol import sse, states

pytestmark = pytest.mark.unit

TASK_ID = "tsk_0199c4e2f1b7712a9d3e4f5061728394"
CONTEXT_ID = "ctx_0199c4e2f1b7712a9d3e4f50617283a1"

SPEC_EVENT_3 = (
    b'id: 3\ndata: {"jsonrpc":"2.0","id":"r1","result":{"statusUpdate":'
    b'{"taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394",'
    b'"contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1","status":{"state":"TASK_STATE_WORKING","message":'
    b'{"messageId":"msg_0199c4e2f1b87a01b2c3d4e5f6071829","contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1",'
    b'"taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394","role":"ROLE_AGENT","parts":[{"mediaType":"text/plain",'
    b'"text":"inference turn 2"}]},"timestamp":"2026-10-13T09:00:00.123Z"}}}}\n\n'
)


def test_spec_event_id_3_byte_for_byte():
    status = ev.task_status(
        states.WORKING, "2026-10-13T09:00:00.123Z", states.inference_turn(2),
        task_id=TASK_ID, context_id=CONTEXT_ID, message_id="msg_0199c4e2f1b87a01b2c3d4e5f6071829",
    )
    result_json = orjson.dumps(ev.status_update(TASK_ID, CONTEXT_ID, status))
    assert sse.frame_event(3, orjson.dumps("r1"), result_json) == SPEC_EVENT_3


def test_event_is_one_data_line_and_a_blank_line():
    result_json = orjson.dumps(ev.taskless_frame_event(ev.text_frame("a\nb", False)))
    event = sse.frame_event(None, b"1", result_json)
    assert event.startswith(b'data: {"jsonrpc":"2.0","id":1,"result":{"message"')
    assert event.endswith(b"}\n\n") and event.count(b"\n") == 2
    body = orjson.loads(event[len(b"data: "):])
    assert body["id"] == 1 and body["result"] == orjson.loads(result_json)


def test_request_id_is_spliced_verbatim():
    for rpc_id in ("r1", 7, "quote\"d", 2**63):
        body = orjson.loads(sse.frame_event(12, orjson.dumps(rpc_id), b"{}")[len(b"id: 12\ndata: "):])
        assert body == {"jsonrpc": "2.0", "id": rpc_id, "result": {}}


def test_heads_and_heartbeat():
    assert sse.event_head(18446744073709551615) == b"id: 18446744073709551615\ndata: "
    assert sse.event_head(None) == b"data: "
    assert sse.HEARTBEAT == b":heartbeat\n\n"


def test_json_rpc_result_body():
    assert sse.json_rpc_result("g1", {"id": "tsk_1"}) == b'{"jsonrpc":"2.0","id":"g1","result":{"id":"tsk_1"}}'
    assert orjson.loads(sse.json_rpc_result(None, [])) == {"jsonrpc": "2.0", "id": None, "result": []}
