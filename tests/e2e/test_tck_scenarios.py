"""The A2A TCK's `tck-` scripts end to end, through the real gateway over real sockets.

Each test sends what the A2A TCK 1.0 sends (a messageId `tck-<scenario>-<session>`) and
checks the answer the TCK's tests read: SendMessage's task once it settles, its artifact,
the multi-turn replies, and the events of the streamed scripts. Every task and artifact
answered is also parsed with the A2A SDK's protobuf types.
"""

from __future__ import annotations

import base64
import itertools

import orjson
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format

from helpers.gateway_harness import wait_for
from helpers.http_client import rpc
from helpers.sse_reading import SSEStream, describe, item

SESSION = "5e55a0b1"
_serial = itertools.count(1)


def tck_message(scenario: str, text: str = "TCK test", **extra) -> dict:
    return {"message": {"messageId": f"tck-{scenario}-{SESSION}-{next(_serial)}", "role": "ROLE_USER",
                        "parts": [{"text": text}], **extra}}


def a2a_task(task: dict) -> dict:
    json_format.Parse(orjson.dumps(task), a2a_pb2.Task(), ignore_unknown_fields=False)
    return task


def send(gateway, params: dict) -> dict:
    """SendMessage's result; the task it holds is A2A-checked."""
    status, _, body = rpc(gateway.port, "SendMessage", params)
    assert status == 200 and "result" in body, body
    return a2a_task(body["result"]["task"])


def get(gateway, task_id: str) -> dict:
    return rpc(gateway.port, "GetTask", {"id": task_id})[2]["result"]


def state(task: dict) -> str:
    return task["status"]["state"].removeprefix("TASK_STATE_").lower()


def response_parts(task: dict) -> list[dict]:
    [artifact] = task["artifacts"]
    assert artifact["name"] == "response" and artifact["artifactId"].startswith("art_")
    return artifact["parts"]


def test_complete_task_answers_once_completed(gateway):
    task = send(gateway, tck_message("complete-task"))
    assert state(task) == "completed"
    assert task["status"]["message"]["parts"][0]["text"] == "task completed"
    assert response_parts(task) == [{"mediaType": "text/plain", "text": "Hello from TCK"}]
    assert get(gateway, task["id"]) == task


def test_return_immediately_answers_the_submitted_task(gateway):
    task = send(gateway, {**tck_message("complete-task"), "configuration": {"returnImmediately": True}})
    assert state(task) == "submitted"
    done = wait_for(lambda: (t := get(gateway, task["id"])) and state(t) == "completed" and t,
                    what="the task to complete")
    assert response_parts(done)[0]["text"] == "Hello from TCK"


def test_other_messages_still_answer_at_once(gateway):
    status, _, body = rpc(gateway.port, "SendMessage", {"message": {
        "messageId": "msg-not-tck", "role": "ROLE_USER", "parts": [{"text": "tck-complete-task"}]}})
    assert status == 200 and state(body["result"]["task"]) == "submitted"


def test_input_required_then_replies_by_their_message_ids(gateway):
    task = send(gateway, tck_message("input-required"))
    assert state(task) == "input_required"
    assert task["status"]["message"]["parts"][0]["text"] == "The TCK asks for input"
    again = send(gateway, tck_message("input-required", "TCK history message 1", taskId=task["id"]))
    assert (again["id"], state(again)) == (task["id"], "input_required")
    done = send(gateway, tck_message("complete-task", "done", taskId=task["id"],
                                     contextId=task["contextId"]))
    assert (done["id"], state(done)) == (task["id"], "completed")
    assert response_parts(done)[0]["text"] == "Hello from TCK"
    _, _, ended = rpc(gateway.port, "SendMessage", tck_message("complete-task", taskId=task["id"]))
    assert ended["error"]["code"] == -32004


def test_subscriber_follows_an_input_required_task_to_its_end(gateway):
    task = send(gateway, tck_message("input-required"))
    with SSEStream(gateway.port, "SubscribeToTask", {"id": task["id"]}) as stream:
        first = stream.next()
        assert item(first).kind == "task" and state(item(first).body) == "input_required"
        send(gateway, tck_message("complete-task", taskId=task["id"]))
        rest = [describe(e) for e in stream.events()]
    assert rest == ["working:resumed", "working:inference turn 2", "artifactUpdate",
                    "completed:task completed"]


@pytest.mark.parametrize("scenario, part", [
    ("artifact-text", {"mediaType": "text/plain", "text": "Generated text content"}),
    ("artifact-file", {"raw": base64.b64encode(b"tck").decode(), "filename": "output.txt",
                       "mediaType": "text/plain"}),
    ("artifact-file-url", {"url": "https://example.com/output.txt", "filename": "output.txt",
                           "mediaType": "text/plain"}),
    ("artifact-data", {"data": {"key": "value", "count": 42}}),
])
def test_artifact_scripts(gateway, scenario, part):
    task = send(gateway, tck_message(scenario))
    assert state(task) == "completed" and response_parts(task) == [part]


def test_message_response_answers_a_message_and_keeps_no_task(gateway):
    _, _, before = rpc(gateway.port, "ListTasks", {})
    status, _, body = rpc(gateway.port, "SendMessage", tck_message("message-response"))
    message = body["result"]["message"]
    json_format.Parse(orjson.dumps(body["result"]), a2a_pb2.SendMessageResponse(), ignore_unknown_fields=False)
    assert message["role"] == "ROLE_AGENT" and message["parts"] == [
        {"mediaType": "text/plain", "text": "Direct message response"}]
    assert "taskId" not in message
    _, _, after = rpc(gateway.port, "ListTasks", {})
    assert after["result"]["totalSize"] == before["result"]["totalSize"]


def test_reject_task_fails_with_its_error(gateway):
    task = send(gateway, tck_message("reject-task"))
    assert state(task) == "failed"
    assert task["status"]["message"]["parts"][0]["text"] == "error[rejected]: rejected"


def test_unknown_tck_prefix_completes_naming_it(gateway):
    params = tck_message("dm-test-001")
    task = send(gateway, params)
    assert response_parts(task)[0]["text"] == f"Unhandled messageId prefix: {params['message']['messageId']}"


@pytest.mark.parametrize("scenario, text", [
    ("stream-001", "Stream hello from TCK"),
    ("stream-003", "Stream task lifecycle"),
    ("stream-ordering-001", "Ordered output"),
    ("stream-artifact-text", "Streamed text content"),
])
def test_streamed_scripts(gateway, scenario, text):
    with SSEStream(gateway.port, "SendStreamingMessage", tck_message(scenario)) as stream:
        events = list(stream.events())
    assert stream.ended and item(events[0]).kind == "task" and events[0].id is None
    assert [describe(e) for e in events[1:]] == [
        "working:inference turn 1", "artifactUpdate", "completed:task completed"]
    assert item(events[2]).body["artifact"]["parts"] == [{"mediaType": "text/plain", "text": text}]


def test_stream_002_completes_without_an_artifact(gateway):
    with SSEStream(gateway.port, "SendStreamingMessage", tck_message("stream-002")) as stream:
        assert [describe(e) for e in stream.events()] == [
            "task", "working:inference turn 1", "completed:task completed"]


def test_stream_artifact_file(gateway):
    with SSEStream(gateway.port, "SendStreamingMessage", tck_message("stream-artifact-file")) as stream:
        events = list(stream.events())
    [update] = [item(e).body for e in events if item(e).kind == "artifactUpdate"]
    assert update["artifact"]["parts"][0]["filename"] == "output.txt"
    assert describe(events[-1]) == "completed:task completed"


def test_chunked_artifact_streams_as_text_frames(gateway):
    with SSEStream(gateway.port, "SendStreamingMessage", tck_message("stream-artifact-chunked"),
                   activate=True) as stream:
        events = [describe(e) for e in stream.events()]
    assert events[1:] == ["working:inference turn 1", "text:chunk-1 ", "text:chunk-2", "text!:",
                          "artifactUpdate", "completed:task completed"]
