"""The door's tokens and task visibility end to end ([network.authentication], SECURITY.md).

One gateway with five tokens: alice (two tokens under one name, as during a rotation) and bob
create tasks; ops holds murmur.WatchSession and so sees every task; narrow holds only
ListTasks. A task a caller does not see must be answered byte for byte like an unknown one.
"""

from __future__ import annotations

import hashlib

import orjson
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format

from gateway.protocol.uris import CAPSULE_URI, DOOR_URI, OWN_TASKS_URI, STREAM_URI
from helpers.gateway_harness import GatewayOptions, front_of, running_gateway, token_table, wait_for
from helpers.http_client import Http, headers_for, problem_detail, rpc, user_message
from helpers.sse_reading import SSEStream, describe, is_terminal_event, item, unknown_like

ALICE, ALICE_NEXT, BOB, OPS, NARROW = ("alice-9f8e7d", "alice-next-6c5b4a", "bob-3a2b1c",
                                       "ops-0d1e2f", "narrow-7a6b5c")
TOKENS = (ALICE, ALICE_NEXT, BOB, OPS, NARROW)
OWN_TASKS = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
             "SubscribeToTask", "GetExtendedAgentCard"]
RULES = [("alice", ALICE, OWN_TASKS), ("alice", ALICE_NEXT, OWN_TASKS), ("bob", BOB, OWN_TASKS),
         ("ops", OPS, ["murmur.WatchSession", "GetTask", "ListTasks"]), ("narrow", NARROW, ["ListTasks"])]
METHODS = ["SendStreamingMessage", "SubscribeToTask", "murmur.WatchSession", "SendMessage", "GetTask",
           "ListTasks", "CancelTask", "murmur.StopSession", "GetExtendedAgentCard"]
SSM = "SendStreamingMessage"


@pytest.fixture(scope="module")
def gateway_options(tmp_path_factory):
    config = tmp_path_factory.mktemp("door") / "door.toml"
    config.write_text(token_table(RULES))
    return GatewayOptions("--config", str(config), "--log-level", "debug")


def create(port: int, token: str, text: str) -> str:
    status, _, body = rpc(port, "SendMessage", user_message(text), token=token)
    assert status == 200 and "result" in body, body
    return body["result"]["task"]["id"]


def state_of(port: int, token: str, task_id: str) -> str:
    return rpc(port, "GetTask", {"id": task_id}, token=token)[2]["result"]["status"]["state"]


def reply(task_id: str) -> dict:
    return user_message("README.md", taskId=task_id)


# --- authentication ---

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_no_or_unknown_token_is_401_with_problem_details_before_any_stream(gateway, method, token):
    """[claim: auth-401]"""
    status, headers, body = rpc(gateway.port, method, {}, token=token)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert problem_detail(401, headers, body) == (
        "this door requires Authorization: Bearer <token>" if token is None
        else "the bearer token is not valid for this door")


def test_401_is_decided_from_the_head_before_the_body_is_read(gateway):
    """[claim: auth-401]"""
    for body in (b"not json at all", b"{" * 100, b'{"jsonrpc":"2.0","id":1,"method":"NoSuchMethod"}'):
        status, headers, answer = Http(gateway.port).request("POST", "/", headers_for(), body)
        assert status == 401 and problem_detail(401, headers, answer)


@pytest.mark.parametrize("method", ["murmur.WatchSession", "GetTask", "murmur.StopSession"])
def test_a_token_without_the_methods_scope_is_403_with_problem_details(gateway, method):
    """[claim: auth-403]"""
    status, headers, body = rpc(gateway.port, method, {}, token=NARROW)
    assert status == 403
    assert problem_detail(403, headers, body) == f"the token does not hold the {method} scope"


def test_a_scoped_token_reaches_its_method(gateway):
    status, _, body = rpc(gateway.port, "ListTasks", {}, token=NARROW)
    assert status == 200 and "tasks" in body["result"]


def test_public_card_names_the_scheme_and_lists_the_stream_after_the_door(gateway):
    """[claim: public-card]"""
    status, _, body = Http(gateway.port).request("GET", "/.well-known/agent-card.json")
    assert status == 200
    card = orjson.loads(body)
    json_format.Parse(body, a2a_pb2.AgentCard(), ignore_unknown_fields=False)
    assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    uris = [ext["uri"] for ext in card["capabilities"]["extensions"]]
    assert uris == [DOOR_URI, CAPSULE_URI, STREAM_URI, OWN_TASKS_URI]
    assert card["capabilities"]["extendedAgentCard"] is True


def test_extended_card_needs_a_token_and_carries_the_stream_extension(gateway):
    """[claim: public-card]"""
    assert rpc(gateway.port, "GetExtendedAgentCard", {})[0] == 401
    status, _, body = rpc(gateway.port, "GetExtendedAgentCard", {}, token=ALICE)
    assert status == 200
    json_format.Parse(orjson.dumps(body["result"]), a2a_pb2.AgentCard(), ignore_unknown_fields=False)
    assert [ext["uri"] for ext in body["result"]["capabilities"]["extensions"]] == [DOOR_URI, CAPSULE_URI, STREAM_URI,
                                                                                 OWN_TASKS_URI]


def test_tokens_are_never_logged(gateway):
    """[claim: tokens-never-logged]"""
    for token in (*TOKENS, "wrong-token-5e4d3c"):
        rpc(gateway.port, "GetTask", {"id": "tsk_none"}, token=token)
        rpc(gateway.port, "SendMessage", {"message": "bad"}, token=token)
        Http(gateway.port).request("GET", "/attachments/tsk_none/" + "0" * 64, headers_for(token=token))
    logs = gateway.stderr()
    assert '"level":"debug"' in logs or "sequencer ready" in logs
    for token in (*TOKENS, "wrong-token-5e4d3c"):
        assert token not in logs


# --- visibility ---

@pytest.fixture(scope="module")
def alices_waiting_task(gateway):
    task_id = create(gateway.port, ALICE, "/scenario input")
    wait_for(lambda: state_of(gateway.port, ALICE, task_id) == "TASK_STATE_INPUT_REQUIRED",
             what="alice's task to wait for input")
    return task_id


CALLS = {
    "GetTask": lambda task_id: {"id": task_id},
    "CancelTask": lambda task_id: {"id": task_id},
    "SubscribeToTask": lambda task_id: {"id": task_id},
    "SendMessage": reply,
    "SendStreamingMessage": reply,
}


@pytest.mark.parametrize("method", CALLS)
def test_an_unseen_task_is_answered_exactly_like_an_unknown_one(gateway, alices_waiting_task, method):
    """[claim: unseen-is-unknown]"""
    task_id, unknown = alices_waiting_task, unknown_like(alices_waiting_task)
    seen = rpc(gateway.port, method, CALLS[method](task_id), token=BOB, rpc_id="q")
    unseen = rpc(gateway.port, method, CALLS[method](unknown), token=BOB, rpc_id="q")
    assert seen[0] == unseen[0] == 200 and seen[2]["error"]["code"] == -32001
    assert seen[1] == unseen[1]
    assert orjson.dumps(seen[2]).replace(task_id.encode(), b"ID") == \
        orjson.dumps(unseen[2]).replace(unknown.encode(), b"ID")
    assert state_of(gateway.port, ALICE, task_id) == "TASK_STATE_INPUT_REQUIRED"


def test_list_tasks_shows_own_tasks_and_watch_scope_shows_all(gateway, alices_waiting_task):
    """[claim: task-visibility]"""
    bobs = create(gateway.port, BOB, "/scenario input")

    def listed(token: str) -> set[str]:
        return {t["id"] for t in rpc(gateway.port, "ListTasks", {"pageSize": 100}, token=token)[2]["result"]["tasks"]}

    assert alices_waiting_task in listed(ALICE) and bobs not in listed(ALICE)
    assert bobs in listed(BOB) and alices_waiting_task not in listed(BOB)
    assert {alices_waiting_task, bobs} <= listed(OPS)
    assert listed(NARROW) == set()
    assert rpc(gateway.port, "GetTask", {"id": bobs}, token=OPS)[2]["result"]["id"] == bobs
    canceled = rpc(gateway.port, "CancelTask", {"id": bobs}, token=BOB)[2]["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


def test_a_rotated_token_under_the_same_name_keeps_its_tasks(gateway, alices_waiting_task):
    """[claim: task-owner-name]"""
    assert state_of(gateway.port, ALICE_NEXT, alices_waiting_task) == "TASK_STATE_INPUT_REQUIRED"


def test_the_owner_replies_and_subscribes(gateway, alices_waiting_task):
    with SSEStream(gateway.port, "SubscribeToTask", {"id": alices_waiting_task}, token=ALICE) as sub:
        assert sub.status == 200 and item(sub.next()).kind == "task"
        status, _, body = rpc(gateway.port, "SendMessage", reply(alices_waiting_task), token=ALICE_NEXT)
        assert status == 200 and body["result"]["task"]["id"] == alices_waiting_task
        assert describe(sub.read_until(is_terminal_event)[-1]) == "completed:task completed"


# --- attachments (spec "Attachment bytes") ---

@pytest.fixture(scope="module")
def alices_attachment(gateway):
    with SSEStream(gateway.port, SSM, user_message("/scenario image"), activate=True, token=ALICE) as stream:
        assert stream.status == 200
        events = stream.read_until(is_terminal_event)
    frame = next(item(e).frame for e in events if item(e).frame and item(e).frame["frame"] == "artifact")
    return frame["attachments"][0]


def get(port: int, path: str, token: str | None = None, method: str = "GET"):
    return Http(port).request(method, path, headers_for(token=token, version=None, content_type=None))


def test_attachment_rows(gateway, alices_attachment):
    """[claim: unseen-is-unknown] [claim: attachments-nosniff]"""
    url, sha = alices_attachment["url"], alices_attachment["sha256"]
    task_id = url.split("/")[2]
    for token in (ALICE, ALICE_NEXT, OPS):
        status, headers, body = get(gateway.port, url, token)
        assert status == 200 and headers["content-type"] == "image/png"
        assert headers["x-content-type-options"] == "nosniff"
        assert hashlib.sha256(body).hexdigest() == sha
    for token in (None, "not-a-token"):
        status, headers, body = get(gateway.port, url, token)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer") and problem_detail(401, headers, body)
    status, headers, body = get(gateway.port, url, NARROW)
    assert status == 403 and problem_detail(403, headers, body) == "the token does not hold the GetTask scope"
    unseen = get(gateway.port, url, BOB)
    unknown = get(gateway.port, f"/attachments/{unknown_like(task_id)}/{sha}", BOB)
    assert unseen == unknown and unseen[0] == 404 and unseen[2] == b""
    assert get(gateway.port, f"/attachments/{task_id}/{'0' * 64}", ALICE)[:3:2] == (404, b"")
    for method in ("POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PROPFIND"):
        status, headers, body = get(gateway.port, url, ALICE, method)
        assert (status, headers["allow"], body) == (405, "GET", b"")


@pytest.mark.parametrize("path", [
    "/attachments/../../../etc/passwd", "/attachments/..%2F..%2F..%2Fetc/passwd",
    "/attachments/%2e%2e/%2e%2e", "/attachments/../passwd", "/attachments/tsk_x/..%2f..%2fetc%2fpasswd",
    "/attachments/.//etc/passwd", "/attachments//etc/passwd", "/attachments/tsk_x/%00",
])
def test_no_path_outside_the_attachment_store_is_reachable(gateway, path):
    """[claim: attachments-no-path]"""
    status, headers, body = get(gateway.port, path, ALICE)
    assert status == 404 and b"root:" not in body


def test_attachment_while_the_sequencer_is_unreachable_is_503():
    """The worker outlives its sequencer by a moment (the supervisor then drains it): an
    attachment asked for meanwhile is a JSON 503 with Retry-After, not a 500, and not
    counted as a refusal."""
    import asyncio

    import httpx

    from gateway.config.resolve import load
    from gateway.worker.app import AttachmentEndpoint
    from gateway.worker.door import Door
    from gateway.worker.door.limits import ClientLimits

    class Unreachable:
        async def call(self, op, **params):
            raise ConnectionError("sequencer connection lost")

    class Counters:
        def __init__(self):
            self.added = []

        def add(self, *args, **kwargs):
            self.added.append((args, kwargs))

    config = load([])
    counters = Counters()
    endpoint = AttachmentEndpoint(Door(config, counters), ClientLimits(config, Unreachable()), Unreachable(), counters)

    async def app(scope, receive, send):
        scope["path_params"] = {"task_id": "tsk_x", "sha256": "0" * 64}
        await endpoint(scope, receive, send)

    async def get():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.get("/attachments/tsk_x/" + "0" * 64)

    answer = asyncio.run(get())
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert problem_detail(503, answer.headers, answer.content) == "the sequencer is not reachable"
    assert counters.added == []  # the gateway's own trouble, not a refusal: counted nowhere


# --- a context belongs to its callers (SECURITY.md) ---

def context_of(port: int, token: str, task_id: str) -> str:
    return rpc(port, "GetTask", {"id": task_id}, token=token)[2]["result"]["contextId"]


def joins(port: int, token: str, context_id: str) -> dict:
    return rpc(port, "SendMessage", user_message("hello", contextId=context_id), token=token)[2]


def check_context_rule(port: int, alice_task: str) -> None:
    """Bob naming alice's context is answered like an unknown task; alice (under her rotated
    token too) joins it; a context never seen is taken as a new one."""
    context_id = context_of(port, ALICE, alice_task)
    refused = joins(port, BOB, context_id)
    assert refused["error"]["code"] == -32001 and refused["error"]["message"] == f"context {context_id} not found"
    assert joins(port, ALICE_NEXT, context_id)["result"]["task"]["contextId"] == context_id
    fresh = f"ctx-{hashlib.sha256(context_id.encode()).hexdigest()[:16]}"
    assert joins(port, BOB, fresh)["result"]["task"]["contextId"] == fresh


def test_security_claim_a_context_belongs_to_its_callers(gateway, alices_waiting_task):
    """[claim: context-owners]"""
    check_context_rule(gateway.port, alices_waiting_task)


def test_security_claim_a_context_belongs_to_its_callers_upstream(tmp_path):
    """[claim: context-owners]"""
    config = tmp_path / "door.toml"
    config.write_text(token_table(RULES))
    with running_gateway(workers=1, tmp_path=tmp_path) as a, front_of(a, tmp_path, "--config", str(config),
                                                                       workers=1) as b:
        check_context_rule(b.port, create(b.port, ALICE, "hello"))
