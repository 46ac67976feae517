"""Rules every tool-calling scenario keeps, on both inference transports, over real sockets.

Each rule is checked on every scenario that makes tool calls (default, tools, image,
maxturns, input, timeout), against a gateway whose TOML says `[inference] transport`:

- a task's frames ride a statusUpdate in TASK_STATE_WORKING with no message (spec Carriers);
- the empty `"final":true` text frame comes only after a turn that streamed text (Event
  order, step 3);
- artifact frames are the transport's (spec Transports): on `process` exitCode null,
  truncated false, attachments [] (nothing stored), images as placeholders in content and
  fenceSource only where content still opens with that fence.
And a reply after a `request-input` wait timed out is refused -32004 (docs/architecture.md,
the product decisions).
"""

from __future__ import annotations

import hashlib

import pytest

from gateway.sequencer.capsule.scripts import SCREENSHOT
from helpers.gateway_harness import GatewayOptions
from helpers.http_client import Http, rpc, user_message
from helpers.sse_reading import describe, item, send, task_events, task_id_of, watch

TOOL_SCENARIOS = ["hello", "/scenario tools n=2", "/scenario image", "/scenario maxturns",
                  "/scenario input prompt=Which?", "/scenario timeout"]
ARTIFACT_KEYS = ["frame", "toolName", "content", "fenceSource", "toolCallId", "isError", "durationMs",
                 "exitCode", "truncated", "attachments"]


@pytest.fixture(scope="module", params=["http", "process"])
def transport(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def gateway_options(transport, tmp_path_factory):
    config = tmp_path_factory.mktemp(transport) / "gateway.toml"
    config.write_text(f'[inference]\ntransport = "{transport}"\n')
    return GatewayOptions("--config", str(config))


def run_task(port: int, text: str) -> tuple[str, list]:
    """The task's id and its events on a watch stream, to its terminal status; an input
    scenario is answered `README.md` once it asks."""
    with watch(port, last_event_id=str(2**40)) as stream:
        task_id = send(port, text)
        seen = []
        if text.startswith("/scenario input"):
            seen = [e for e in stream.read_until(
                lambda e: task_id_of(e) == task_id and describe(e).startswith("input_required"))
                if task_id_of(e) == task_id]
            status, _, body = rpc(port, "SendMessage", user_message("README.md", taskId=task_id))
            assert status == 200 and "result" in body, body
        return task_id, seen + task_events(stream, task_id)


@pytest.mark.parametrize("text", TOOL_SCENARIOS)
def test_every_carrier_is_a_working_status_without_a_message(gateway, text):
    _, events = run_task(gateway.port, text)
    carriers = [item(e) for e in events if item(e).frame is not None]
    assert any(c.frame["frame"] == "artifact" for c in carriers)
    for carrier in carriers:
        assert carrier.kind == "statusUpdate"
        assert set(carrier.body["status"]) == {"state", "timestamp"}, carrier.body
        assert carrier.body["status"]["state"] == "TASK_STATE_WORKING", (carrier.frame, carrier.body)


@pytest.mark.parametrize("text", TOOL_SCENARIOS)
def test_an_empty_final_text_frame_only_ends_a_turn_that_streamed_text(gateway, text):
    _, events = run_task(gateway.port, text)
    streamed = False
    for name in map(describe, events):
        if name.startswith("working:inference turn"):
            streamed = False
        elif name.startswith("text:"):
            streamed = True
        elif name == "text!:":
            assert streamed, [describe(e) for e in events]
            streamed = False


@pytest.mark.parametrize("text", TOOL_SCENARIOS)
def test_artifact_frames_are_the_transports(gateway, transport, text):
    _, events = run_task(gateway.port, text)
    frames = [item(e).frame for e in events if describe(e) == "artifact"]
    assert frames
    for frame in frames:
        assert list(frame) == ARTIFACT_KEYS
        assert frame["truncated"] is False
        if frame["fenceSource"] is not None:
            assert frame["content"].startswith(f"<untrusted-content source={frame['fenceSource']}>\n")
        if transport == "process":
            assert frame["exitCode"] is None and frame["attachments"] == [], frame
    if text == "hello" and transport == "http":
        assert frames[0]["exitCode"] == 0


def test_the_order_of_the_input_and_timeout_scenarios(gateway):
    _, answered = run_task(gateway.port, "/scenario input prompt=Which?")
    assert [describe(e) for e in answered] == [
        "working:inference turn 1", "tool-call-started", "tool-call-progress", "input_required:Which?",
        "working:resumed", "artifact", "working:inference turn 2", "text:README.md", "text!:",
        "artifactUpdate", "completed:task completed"]
    _, timed_out = run_task(gateway.port, "/scenario timeout")
    assert [describe(e) for e in timed_out] == [
        "working:inference turn 1", "tool-call-started", "tool-call-progress",
        "input_required:Which file?", "artifact", "failed:input-timeout"]


def test_an_image_is_listed_and_served_on_http_and_a_placeholder_on_process(gateway, transport):
    task_id, events = run_task(gateway.port, "/scenario image")
    frame = next(item(e).frame for e in events if describe(e) == "artifact")
    sha = hashlib.sha256(SCREENSHOT).hexdigest()
    fence = "<untrusted-content source=tool:screenshot>\nsaved shot.png\n</untrusted-content>"
    url = f"/attachments/{task_id}/{sha}"
    status, _, body = Http(gateway.port).request("GET", url)
    if transport == "process":
        assert frame["content"] == f"{fence}\n[image: image/png, {len(SCREENSHOT)} bytes, sha256 {sha}]"
        assert frame["fenceSource"] == "tool:screenshot" and frame["attachments"] == []
        assert (status, body) == (404, b"")  # nothing is stored
    else:
        assert frame["content"] == fence
        assert frame["attachments"] == [{"mediaType": "image/png", "sizeBytes": len(SCREENSHOT),
                                         "sha256": sha, "url": url}]
        assert status == 200 and body == SCREENSHOT


def test_a_reply_after_the_wait_timed_out_is_refused_as_to_a_working_task(gateway):
    with watch(gateway.port, last_event_id=str(2**40)) as stream:
        task_id = send(gateway.port, "/scenario timeout hooks=60")
        seen = stream.read_until(lambda e: task_id_of(e) == task_id and describe(e) == "artifact")
        assert item(seen[-1]).frame["isError"] is True  # the call failed: the wait is over
        _, _, task = rpc(gateway.port, "GetTask", {"id": task_id})
        assert task["result"]["status"]["state"] == "TASK_STATE_WORKING"
        reply = user_message("too late", taskId=task_id)
        for method in ("SendMessage", "SendStreamingMessage"):
            status, headers, body = rpc(gateway.port, method, reply)
            assert status == 200 and headers["content-type"] == "application/json"
            assert body["error"]["code"] == -32004, body
        rpc(gateway.port, "CancelTask", {"id": task_id})
        rest = [describe(e) for e in task_events(stream, task_id)]
    assert rest == ["canceled:task canceled"]  # no `resumed`: the reply was never taken
