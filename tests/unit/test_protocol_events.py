"""gateway.protocol.events: the spec's example events and frames, byte for byte, and
every builder's result accepted by the A2A SDK as a v1.0 StreamResponse."""

import orjson
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format

from gateway.protocol import events as ev
from gateway.protocol import states

pytestmark = pytest.mark.unit

TASK_ID = "tsk_0199c4e2f1b7712a9d3e4f5061728394"
CONTEXT_ID = "ctx_0199c4e2f1b7712a9d3e4f50617283a1"
TS = "2026-10-13T09:00:00.123Z"


def assert_stream_response(result: dict) -> None:
    json_format.Parse(orjson.dumps(result), a2a_pb2.StreamResponse())


def test_timestamp_is_rfc3339_utc_milliseconds():
    assert ev.timestamp(1791882000.123) == TS
    assert ev.timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert len(ev.timestamp()) == len(TS) and ev.timestamp().endswith("Z")


def test_inference_turn_status_update_example():
    status = ev.task_status(
        states.WORKING, TS, states.inference_turn(2),
        task_id=TASK_ID, context_id=CONTEXT_ID, message_id="msg_0199c4e2f1b87a01b2c3d4e5f6071829",
    )
    result = ev.status_update(TASK_ID, CONTEXT_ID, status)
    assert orjson.dumps(result) == (
        b'{"statusUpdate":{"taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394","contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1",'
        b'"status":{"state":"TASK_STATE_WORKING","message":{"messageId":"msg_0199c4e2f1b87a01b2c3d4e5f6071829",'
        b'"contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1","taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394",'
        b'"role":"ROLE_AGENT","parts":[{"mediaType":"text/plain","text":"inference turn 2"}]},'
        b'"timestamp":"2026-10-13T09:00:00.123Z"}}}'
    )
    assert_stream_response(result)


def test_reopen_example_and_its_plain_form():
    status = ev.task_status(
        states.WORKING, TS, states.reopened_by_hook("review-gate"),
        task_id=TASK_ID, context_id=CONTEXT_ID, message_id="msg_0199c4e2f2117c0aa1b2c3d4e5f60718",
    )
    activated, plain = ev.reopen_status_update(TASK_ID, CONTEXT_ID, status, 1)
    assert orjson.dumps(activated) == (
        b'{"statusUpdate":{"taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394","contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1",'
        b'"status":{"state":"TASK_STATE_WORKING","message":{"messageId":"msg_0199c4e2f2117c0aa1b2c3d4e5f60718",'
        b'"contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1","taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394",'
        b'"role":"ROLE_AGENT","parts":[{"mediaType":"text/plain","text":"reopened by hook review-gate"}]},'
        b'"timestamp":"2026-10-13T09:00:00.123Z"},'
        b'"metadata":{"https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1":{"reopen":1}}}}'
    )
    assert plain == {"statusUpdate": {k: v for k, v in activated["statusUpdate"].items() if k != "metadata"}}
    assert_stream_response(activated)
    assert_stream_response(plain)


def test_text_carrier_example():
    result = ev.task_frame_event(TASK_ID, CONTEXT_ID, ev.text_frame("README.md describes", False), ts=TS)
    assert orjson.dumps(result) == (
        b'{"statusUpdate":{"taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394","contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1",'
        b'"status":{"state":"TASK_STATE_WORKING","timestamp":"2026-10-13T09:00:00.123Z"},'
        b'"metadata":{"https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1":'
        b'{"frame":"text","text":"README.md describes","final":false}}}}'
    )
    assert_stream_response(result)


def test_connection_ack_carrier_example():
    result = ev.taskless_frame_event(ev.connection_ack_frame("stateless"), "msg_0199c4e2f0a77e11a2b3c4d5e6f70819")
    assert orjson.dumps(result) == (
        b'{"message":{"messageId":"msg_0199c4e2f0a77e11a2b3c4d5e6f70819","role":"ROLE_AGENT",'
        b'"parts":[{"mediaType":"text/plain","text":"connection-ack"}],'
        b'"metadata":{"https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1":'
        b'{"frame":"connection-ack","role":"observer","conversationMode":"stateless"}}}}'
    )
    assert_stream_response(result)


FRAME_EXAMPLES = [
    (ev.text_frame("README.md describes", False), r'{"frame":"text","text":"README.md describes","final":false}'),
    (ev.thinking_frame("The file names two targets"),
     r'{"frame":"thinking","text":"The file names two targets","final":false}'),
    (
        ev.tool_call_started_frame("toolu_01", "write_file"),
        r'{"frame":"tool-call-started","toolCallId":"toolu_01","toolName":"write_file"}',
    ),
    (
        ev.tool_call_progress_frame("toolu_01", 3172),
        r'{"frame":"tool-call-progress","toolCallId":"toolu_01","inputBytes":3172}',
    ),
    (
        ev.artifact_frame(
            tool_name="bash",
            content="<untrusted-content source=tool:bash>\nExit code: 0\nStdout:\nhello\n\n</untrusted-content>",
            fence_source="tool:bash", tool_call_id="toolu_01", is_error=False, duration_ms=12, exit_code=0,
            truncated=False, attachments=[],
        ),
        r'{"frame":"artifact","toolName":"bash","content":"<untrusted-content source=tool:bash>\nExit code: 0\nStdout:\nhello\n\n</untrusted-content>","fenceSource":"tool:bash","toolCallId":"toolu_01","isError":false,"durationMs":12,"exitCode":0,"truncated":false,"attachments":[]}',  # noqa: E501 - the spec's example, verbatim
    ),
    (
        ev.artifact_frame(
            tool_name="no-such-tool", content="tool 'no-such-tool' is not declared in manifest allowlist",
            fence_source=None, tool_call_id="toolu_03", is_error=True, duration_ms=0, exit_code=None,
            truncated=False, attachments=[],
        ),
        r"""{"frame":"artifact","toolName":"no-such-tool","content":"tool 'no-such-tool' is not declared in manifest allowlist","fenceSource":null,"toolCallId":"toolu_03","isError":true,"durationMs":0,"exitCode":null,"truncated":false,"attachments":[]}""",  # noqa: E501 - the spec's example, verbatim
    ),
    (
        ev.artifact_frame(
            tool_name="screenshot",
            content="<untrusted-content source=tool:screenshot>\nsaved shot.png\n</untrusted-content>",
            fence_source="tool:screenshot", tool_call_id="toolu_02", is_error=False, duration_ms=40, exit_code=None,
            truncated=False,
            attachments=[ev.attachment("image/png", 48213, "9f2c…", "/attachments/tsk_0199c4e2…/9f2c…")],
        ),
        r'{"frame":"artifact","toolName":"screenshot","content":"<untrusted-content source=tool:screenshot>\nsaved shot.png\n</untrusted-content>","fenceSource":"tool:screenshot","toolCallId":"toolu_02","isError":false,"durationMs":40,"exitCode":null,"truncated":false,"attachments":[{"mediaType":"image/png","sizeBytes":48213,"sha256":"9f2c…","url":"/attachments/tsk_0199c4e2…/9f2c…"}]}',  # noqa: E501 - the spec's example, verbatim
    ),
    (
        ev.artifact_frame(
            tool_name="my-hook", content='{"reviewed":true}', fence_source=None, tool_call_id=None, is_error=False,
            duration_ms=None, exit_code=None, truncated=False, attachments=[],
        ),
        r'{"frame":"artifact","toolName":"my-hook","content":"{\"reviewed\":true}","fenceSource":null,"toolCallId":null,"isError":false,"durationMs":null,"exitCode":null,"truncated":false,"attachments":[]}',
    ),
    (
        ev.quota_frame([
            ev.quota_window("five-hour", used=0.42, resets_at_ms=1793491200000, window_minutes=300, state="ok"),
            ev.quota_window("seven-day", used=0.1),
        ]),
        r'{"frame":"quota","windows":[{"name":"five-hour","used":0.42,"resetsAtMs":1793491200000,"windowMinutes":300,"state":"ok"},{"name":"seven-day","used":0.1}]}',
    ),
    (ev.suggested_prompt_frame("Run the test suite"), r'{"frame":"suggested-prompt","text":"Run the test suite"}'),
    (ev.gap_frame(37), r'{"frame":"gap","firstAvailableId":37}'),
    (ev.lagged_frame(40), r'{"frame":"lagged","missed":40}'),
    (ev.connection_ack_frame("stateless"),
     r'{"frame":"connection-ack","role":"observer","conversationMode":"stateless"}'),
    (ev.capsule_closed_frame(), r'{"frame":"capsule-closed"}'),
]


@pytest.mark.parametrize("frame, spec_json", FRAME_EXAMPLES,
                         ids=[f"{f['frame']}-{i}" for i, (f, _) in enumerate(FRAME_EXAMPLES)])
def test_frame_examples_byte_for_byte(frame, spec_json):
    assert orjson.dumps(frame) == spec_json.encode()


@pytest.mark.parametrize("frame", [f for f, _ in FRAME_EXAMPLES],
                         ids=[f"{f['frame']}-{i}" for i, (f, _) in enumerate(FRAME_EXAMPLES)])
def test_every_frame_parses_as_a2a_in_both_carriers(frame):
    assert_stream_response(ev.task_frame_event(TASK_ID, CONTEXT_ID, frame))
    assert_stream_response(ev.taskless_frame_event(frame))


def test_frame_names_in_card_order():
    assert ev.FRAME_NAMES == (
        "text", "thinking", "tool-call-started", "tool-call-progress", "artifact",
        "gap", "lagged", "connection-ack", "capsule-closed",
    )
    assert ev.PROCESS_FRAME_NAMES == (
        "text", "thinking", "tool-call-started", "tool-call-progress", "artifact", "quota", "suggested-prompt",
        "gap", "lagged", "connection-ack", "capsule-closed",
    )
    assert ev.TASK_FRAMES | ev.CONNECTION_FRAMES == set(ev.PROCESS_FRAME_NAMES)
    assert not ev.TASK_FRAMES & ev.CONNECTION_FRAMES


def test_taskless_carrier_has_no_task_or_context_and_a_fresh_message_id():
    message = ev.taskless_frame_event(ev.capsule_closed_frame())["message"]
    assert "contextId" not in message and "taskId" not in message
    assert message["messageId"].startswith("msg_") and message["parts"][0]["text"] == "capsule-closed"


def test_task_frame_carrier_repeats_the_given_state_without_a_message():
    result = ev.task_frame_event(TASK_ID, CONTEXT_ID, ev.gap_frame(5), state=states.SUBMITTED)
    status = result["statusUpdate"]["status"]
    assert list(status) == ["state", "timestamp"] and status["state"] == states.SUBMITTED


def test_task_status_without_text_has_no_message():
    assert ev.task_status(states.SUBMITTED, TS, task_id=TASK_ID, context_id=CONTEXT_ID) == {
        "state": states.SUBMITTED, "timestamp": TS,
    }


def test_task_event_and_artifact_update_parse_as_a2a():
    artifact = ev.response_artifact("the answer")
    assert list(artifact) == ["artifactId", "name", "parts"] and artifact["artifactId"].startswith("art_")
    assert artifact["name"] == "response"
    done = ev.task_status(states.COMPLETED, TS, states.TASK_COMPLETED, task_id=TASK_ID, context_id=CONTEXT_ID)
    full = ev.task(TASK_ID, CONTEXT_ID, done, [artifact])
    opening = ev.task(TASK_ID, CONTEXT_ID, ev.task_status(states.SUBMITTED, TS, task_id=TASK_ID, context_id=CONTEXT_ID))
    assert list(full) == ["id", "contextId", "status", "artifacts"] and "artifacts" not in opening
    for body in (full, opening):
        json_format.Parse(orjson.dumps(body), a2a_pb2.Task())
        assert_stream_response(ev.task_event(body))
    update = ev.artifact_update(TASK_ID, CONTEXT_ID, artifact)
    assert list(update["artifactUpdate"]) == ["taskId", "contextId", "artifact", "lastChunk"]
    assert update["artifactUpdate"]["lastChunk"] is True
    assert_stream_response(update)
    assert_stream_response(ev.message_event(ev.agent_message("hello")))
