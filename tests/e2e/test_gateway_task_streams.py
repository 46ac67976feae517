"""SendStreamingMessage and SubscribeToTask end to end: every row of the spec, over real sockets."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from gateway.protocol.uris import DOOR_URI, STREAM_URI
from gateway.worker.hypercorn.patches import TEST_SWITCH
from helpers.gateway_harness import GatewayOptions, running_gateway, wait_for
from helpers.http_client import Http, rpc, user_message
from helpers.sse_reading import SSEStream, describe, is_terminal_event, item, task_id_of

SSM, SUB = "SendStreamingMessage", "SubscribeToTask"


@pytest.fixture(scope="module", params=["patched", "internals moved"])
def gateway_options(request) -> GatewayOptions:
    """Every test here twice: on the adapter as it runs, and as where the internals it
    follows have moved (nothing patched: test_fallback.py)."""
    return GatewayOptions(env={TEST_SWITCH: "1"} if request.param == "internals moved" else None)


def stream_all(stream: SSEStream) -> list:
    events = list(stream.events())
    assert stream.ended
    return events


def opening(events: list) -> dict:
    first = events[0]
    assert first.id is None and item(first).kind == "task"
    return item(first).body


def test_plain_stream_carries_only_standard_events_of_its_task(gateway):
    with SSEStream(gateway.port, SSM, user_message("plain one"), rpc_id="r1") as stream:
        assert stream.status == 200
        assert "a2a-extensions" not in stream.headers
        assert stream.headers["content-type"] == "text/event-stream"
        events = stream_all(stream)
    task = opening(events)
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED" and "history" not in task
    assert [describe(e) for e in events[1:]] == [
        "working:inference turn 1", "working:inference turn 2", "artifactUpdate",
        "completed:task completed"]
    assert all(e.id is not None for e in events[1:])
    assert all(orjson.loads(e.data)["id"] == "r1" for e in events)
    assert all(item(e).body.get("taskId", task["id"]) == task["id"] for e in events)
    assert item(events[-2]).body["lastChunk"] is True
    assert b"murmur-stream-v1" not in bytes(stream.raw)


def test_activated_stream_carries_frames(gateway):
    with SSEStream(gateway.port, SSM, user_message("act one"), rpc_id=7, activate=True) as stream:
        assert stream.headers["a2a-extensions"] == STREAM_URI
        events = stream_all(stream)
    assert [describe(e) for e in events[1:]][:3] == ["working:inference turn 1", "thinking", "text:Let me look "]
    assert describe(events[-1]) == "completed:task completed"
    ids = [e.id for e in events[1:]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_door_uri_first_when_message_uses_door(gateway):
    message = user_message("door", metadata={DOOR_URI: {"forgetSession": True}})
    with SSEStream(gateway.port, SSM, message, activate=True) as stream:
        assert stream.headers["a2a-extensions"] == f"{DOOR_URI}, {STREAM_URI}"
        stream_all(stream)
    with SSEStream(gateway.port, SSM, message) as stream:
        assert stream.headers["a2a-extensions"] == DOOR_URI
        stream_all(stream)


def test_reopen_plain_vs_activated_bytes(gateway):
    with SSEStream(gateway.port, SSM, user_message("/scenario reopen")) as plain:
        plain_events = stream_all(plain)
    with SSEStream(gateway.port, SSM, user_message("/scenario reopen"), activate=True) as active:
        active_events = stream_all(active)
    boundary_plain = [e for e in plain_events if describe(e) == "working:reopened by hook review-gate"]
    boundary_active = [e for e in active_events if describe(e) == "working:reopened by hook review-gate"]
    assert "metadata" not in item(boundary_plain[0]).body
    assert item(boundary_active[0]).body["metadata"] == {STREAM_URI: {"reopen": 1}}
    assert item(boundary_active[0]).reopen == 1


def test_input_required_ends_stream_and_reply_resumes_with_replay(gateway):
    with SSEStream(gateway.port, SSM, user_message("/scenario input prompt=Which?"), activate=True) as first:
        events = stream_all(first)
    task = opening(events)
    assert describe(events[-1]) == "input_required:Which?"
    last_id = events[-1].id
    reply = user_message("notes.txt", taskId=task["id"], contextId=task["contextId"])
    with SSEStream(gateway.port, SSM, reply, last_event_id=str(last_id - 2)) as second:
        events2 = stream_all(second)
    reopened = opening(events2)
    assert reopened["id"] == task["id"] and reopened["status"]["state"] == "TASK_STATE_WORKING"
    described = [describe(e) for e in events2[1:]]
    # replay of this task's events after last_id - 2 (the plain ones), then live to the end
    assert described[0] == "input_required:Which?"  # a replayed INPUT_REQUIRED does not end it
    assert "working:resumed" in described
    assert described[-2:] == ["artifactUpdate", "completed:task completed"]
    _, _, body = rpc(gateway.port, "GetTask", {"id": task["id"]})
    assert body["result"]["artifacts"][0]["parts"][0]["text"] == "notes.txt"


@pytest.mark.parametrize("case, message, code", [
    ("malformed", {"message": {"role": "ROLE_USER"}}, -32602),
    ("file part", {"message": {"messageId": "m", "role": "ROLE_USER",
                               "parts": [{"url": "http://x/y.png"}]}}, -32005),
    ("unknown task", user_message("hi", taskId="tsk_nope"), -32001),
    ("no params", None, -32602),
])
def test_ssm_refusals_are_one_json_body(gateway, case, message, code):
    status, headers, body = Http(gateway.port).request(
        "POST", "/", [("Content-Type", "application/json"), ("A2A-Version", "1.0")],
        orjson.dumps({"jsonrpc": "2.0", "id": "x", "method": SSM, **({"params": message} if message else {})}))
    assert status == 200 and headers["content-type"] == "application/json"
    answer = orjson.loads(body)
    assert answer["id"] == "x" and answer["error"]["code"] == code
    assert answer["error"]["data"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"


@pytest.mark.parametrize("version, problem", [
    (None, "the A2A-Version header is missing"),
    ("", "the A2A-Version header is empty"),
    ("2.0", "A2A-Version '2.0' is not supported"),
])
def test_a_request_without_a_1_x_version_is_told_what_the_server_speaks(gateway, version, problem):
    headers = [("Content-Type", "application/json")] + ([] if version is None else [("A2A-Version", version)])
    status, _, body = Http(gateway.port).request("POST", "/", headers, orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": SSM, "params": user_message("hi")}))
    error = orjson.loads(body)["error"]
    assert status == 200 and error["code"] == -32009
    assert error["message"] == f"{problem}; this server speaks 1.0 (send A2A-Version: 1.0)"


def test_reply_rules(gateway):
    _, _, body = rpc(gateway.port, "SendMessage", user_message("/scenario slow turns=2 delay=0.3"))
    working = body["result"]["task"]
    _, _, body = rpc(gateway.port, SSM, user_message("more", taskId=working["id"]))
    assert body["error"]["code"] == -32004  # a message naming a working task
    _, _, body = rpc(gateway.port, "SendMessage", user_message("/scenario input"))
    waiting = body["result"]["task"]
    wait_for(lambda: rpc(gateway.port, "GetTask", {"id": waiting["id"]})[2]["result"]["status"]["state"]
             == "TASK_STATE_INPUT_REQUIRED", what="input required")
    _, _, body = rpc(gateway.port, SSM, user_message("x", taskId=waiting["id"], contextId="ctx_other"))
    assert body["error"]["code"] == -32602  # contextId not the task's
    rpc(gateway.port, "CancelTask", {"id": waiting["id"]})
    _, _, body = rpc(gateway.port, SSM, user_message("x", taskId=waiting["id"]))
    assert body["error"]["code"] == -32004  # a reply to an ended task


def test_subscribe_refusals(gateway):
    assert rpc(gateway.port, SUB, {})[2]["error"]["code"] == -32602
    assert rpc(gateway.port, SUB, {"id": "tsk_unknown"})[2]["error"]["code"] == -32001
    _, _, body = rpc(gateway.port, "SendMessage", user_message("/scenario fail"))
    task_id = body["result"]["task"]["id"]
    wait_for(lambda: rpc(gateway.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"]
             == "TASK_STATE_FAILED", what="failed")
    status, headers, body = rpc(gateway.port, SUB, {"id": task_id})
    assert status == 200 and headers["content-type"] == "application/json"
    assert body["error"]["code"] == -32004


def test_subscribe_opens_with_get_task_and_runs_to_terminal(gateway):
    _, _, body = rpc(gateway.port, "SendMessage", user_message("/scenario slow turns=3 delay=0.15"))
    task_id = body["result"]["task"]["id"]
    wait_for(lambda: rpc(gateway.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"]
             == "TASK_STATE_WORKING", what="working")
    with SSEStream(gateway.port, SUB, {"id": task_id}, activate=True) as stream:
        events = stream_all(stream)
    task = opening(events)
    assert task["id"] == task_id and task["status"]["state"] == "TASK_STATE_WORKING"
    assert describe(events[-1]) == "completed:task completed"
    assert "text:turn 3 done" in [describe(e) for e in events]


def test_subscribe_stays_open_through_input_required(gateway):
    _, _, body = rpc(gateway.port, "SendMessage", user_message("/scenario input prompt=File?"))
    task_id = body["result"]["task"]["id"]
    with SSEStream(gateway.port, SUB, {"id": task_id}) as stream:
        task = opening([stream.next()])
        if task["status"]["state"] != "TASK_STATE_INPUT_REQUIRED":  # not there yet: it comes live
            seen = stream.read_until(lambda e: describe(e) == "input_required:File?")
            assert describe(seen[-1]) == "input_required:File?"
        rpc(gateway.port, "SendMessage", user_message("a.txt", taskId=task_id))
        rest = stream_all(stream)
    if task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and describe(rest[0]) == "input_required:File?":
        # the capsule records a status before it writes its event: the opening read the task
        # between the two, so the event follows the opening that already showed it
        rest = rest[1:]
    assert describe(rest[0]) == "working:resumed"
    assert describe(rest[-1]) == "completed:task completed"


def test_sim_load_task_can_be_subscribed(tmp_path):
    with running_gateway("--sim-load", "200", "--sim-load-size", "64", tmp_path=tmp_path) as gw:
        _, _, body = rpc(gw.port, "ListTasks", {})
        task = body["result"]["tasks"][0]
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        with SSEStream(gw.port, SUB, {"id": task["id"]}, activate=True) as stream:
            assert opening([stream.next()])["id"] == task["id"]
            frames = [item(stream.next()).frame for _ in range(20)]
        assert all(f["frame"] == "text" and f["final"] is False for f in frames)
        assert all(f["text"].split(" ")[0].isdigit() and len(f["text"]) >= 64 for f in frames)


def test_rejected_when_session_closing(tmp_path):
    with running_gateway(tmp_path=tmp_path) as gw:
        rpc(gw.port, "murmur.StopSession", {})
        with SSEStream(gw.port, SSM, user_message("late"), activate=True) as stream:
            events = stream_all(stream)
        assert len(events) == 1 and events[0].id is None
        task = item(events[0]).body
        assert task["status"]["state"] == "TASK_STATE_REJECTED"
        assert task["status"]["message"]["parts"][0]["text"] == "task rejected: the session is closing"


def test_rejected_when_busy_and_task_acceptance_none(tmp_path):
    config = tmp_path / "gw.toml"
    config.write_text("[lifecycle]\nmax_queued_tasks = 1\n")
    with running_gateway("--config", str(config), tmp_path=tmp_path) as gw:
        rpc(gw.port, "SendMessage", user_message("/scenario slow turns=1 delay=5"))
        with SSEStream(gw.port, SSM, user_message("second")) as stream:
            events = stream_all(stream)
        assert [item(e).body["status"]["message"]["parts"][0]["text"] for e in events] == [
            "task rejected: capsule is busy"]
    config.write_text('[lifecycle]\ntask_acceptance = "none"\n')
    with running_gateway("--config", str(config), tmp_path=tmp_path) as gw:
        assert rpc(gw.port, SSM, user_message("x"))[2]["error"]["code"] == -32004
        status, _, card = Http(gw.port).request("GET", "/.well-known/agent-card.json")
        assert orjson.loads(card)["capabilities"]["streaming"] is False
        assert rpc(gw.port, SUB, {"id": "tsk_x"})[2]["error"]["code"] == -32004


def test_lagged_task_stream_still_gets_its_ending(tmp_path):
    with running_gateway(tmp_path=tmp_path, workers=1) as gw:
        with SSEStream(gw.port, SSM, user_message("/scenario burst n=3000"), activate=True,
                       rcvbuf=4096) as stream:
            first = stream.next()
            task_id = item(first).body["id"]
            wait_for(lambda: rpc(gw.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"]
                     == "TASK_STATE_COMPLETED", what="the burst to finish")
            events = stream_all(stream)
        lagged = [item(e) for e in events if item(e).frame and item(e).frame["frame"] == "lagged"]
        assert lagged, "the stalled reader was never lagged"
        assert all(e.kind == "statusUpdate" and e.body["taskId"] == task_id for e in lagged)
        assert describe(events[-1]) == "completed:task completed"
        assert describe(events[-2]) == "artifactUpdate"


def test_an_ending_found_at_the_heartbeat_check_follows_a_lagged_frame(tmp_path):
    """Spec `lagged`: written before the next event the connection receives. A stalled task
    stream whose ending was among the events it lost writes, at its heartbeat check, one
    `lagged` frame naming them, then the ending GetTask reports."""
    with running_gateway("--sim-load", "300", tmp_path=tmp_path, workers=1) as gw:
        # far more than the socket buffers hold: the stream blocks, then skips the burst's end
        with SSEStream(gw.port, SSM, user_message("/scenario burst n=30000"), activate=True,
                       rcvbuf=4096) as stream:
            task_id = item(stream.next()).body["id"]
            wait_for(lambda: rpc(gw.port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"]
                     == "TASK_STATE_COMPLETED", what="the burst to finish")
            # A watcher replaying the buffer finds the task's ending, then waits until 200 more
            # events (the load task's) have passed it: the stalled stream's ending is lost.
            with SSEStream(gw.port, "murmur.WatchSession", {}, last_event_id="0") as watcher:
                done = watcher.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))[-1]
                watcher.read_until(lambda e: e.id is not None and int(e.id) >= int(done.id) + 200)
            events = stream_all(stream)
        lagged, artifact, final = events[-3:]
        assert lagged.id is None and item(lagged).frame["frame"] == "lagged"
        assert item(lagged).body["taskId"] == task_id and item(lagged).frame["missed"] >= 1
        assert artifact.id is None and describe(artifact) == "artifactUpdate"
        assert final.id is None and describe(final) == "completed:task completed"  # from the check


def test_attachment_bytes(gateway):
    with SSEStream(gateway.port, SSM, user_message("/scenario image"), activate=True) as stream:
        events = stream_all(stream)
    frame = next(item(e).frame for e in events if describe(e) == "artifact")
    attachment = frame["attachments"][0]
    status, headers, body = Http(gateway.port).request("GET", attachment["url"])
    assert status == 200 and headers["content-type"] == "image/png"
    assert int(headers["content-length"]) == attachment["sizeBytes"] == len(body)
    assert hashlib.sha256(body).hexdigest() == attachment["sha256"] and body.startswith(b"\x89PNG")
    task_id = attachment["url"].split("/")[2]
    status, _, body = Http(gateway.port).request("GET", f"/attachments/{task_id}/{'0' * 64}")
    assert status == 404 and body == b""
    status, _, body = Http(gateway.port).request("GET", f"/attachments/tsk_none/{attachment['sha256']}")
    assert status == 404 and body == b""
    status, headers, body = Http(gateway.port).request("POST", attachment["url"])
    assert status == 405 and headers["allow"] == "GET" and body == b""


def test_push_config_methods_and_extended_card_on_a_public_door(gateway):
    for method in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
                   "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig"):
        assert rpc(gateway.port, method, {})[2]["error"]["code"] == -32003
    assert rpc(gateway.port, "GetExtendedAgentCard", {})[2]["error"]["code"] == -32007


def test_agent_card_is_cacheable(gateway):
    status, headers, body = Http(gateway.port).request("GET", "/.well-known/agent-card.json")
    card = orjson.loads(body)
    assert status == 200 and headers["content-type"] == "application/json"
    assert "max-age=" in headers["cache-control"] and headers["etag"] and headers["last-modified"]
    assert [e["uri"] for e in card["capabilities"]["extensions"]][::2] == [DOOR_URI, STREAM_URI]
    status, again, body = Http(gateway.port).request(
        "GET", "/.well-known/agent-card.json", [("If-None-Match", headers["etag"])])
    assert status == 304 and body == b"" and again["etag"] == headers["etag"]
