"""Upstream mode answers as the upstream does: every request below is asked of gateway A
directly and of gateway B in front of it, and B's status, headers and body must be A's.

Each case runs twice: both doors public, and both doors with the same token table (B holds
its own door and calls A with a token of A's that sees every task). Task ids differ between
the two runs (each gateway's tasks are created through it), so they are compared by label.
"""

from __future__ import annotations

import contextlib
import urllib.parse

import orjson
import pytest

from helpers.gateway_harness import front_of, running_gateway, token_table, wait_for
from helpers.http_client import Http, headers_for, rpc, upstream_card, user_message
from helpers.sse_reading import SSEStream, describe, item, unknown_like

ALICE, BOB, NARROW, LINK, WATCHER = "alice-4b3c2d", "bob-8e7f6a", "narrow-1a2b3c", "link-5d6e7f", "watcher-9c8d7e"
OWN = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
       "GetExtendedAgentCard"]
RULES = [("alice", ALICE, OWN), ("bob", BOB, OWN), ("narrow", NARROW, ["ListTasks"]), ("link", LINK, ["*"]),
         ("watcher", WATCHER, ["murmur.WatchSession"])]
SSM, SUB = "SendStreamingMessage", "SubscribeToTask"
KEPT_HEADERS = ("content-type", "content-length", "allow", "www-authenticate", "x-content-type-options")


@contextlib.contextmanager
def a_and_b(tmp_path, door: bool, lifecycle: str = ""):
    """Gateway A (the upstream) and gateway B in front of it, both with `door`'s tokens."""
    config = tmp_path / f"gw-{door}.toml"
    config.write_text(lifecycle + (token_table(RULES) if door else ""))
    link = ["--upstream-token", LINK] if door else []
    with running_gateway("--config", str(config), tmp_path=tmp_path) as a, \
            front_of(a, tmp_path, "--config", str(config), *link) as b:
        yield a, b


def kept(headers: dict) -> dict:
    return {name: headers[name] for name in KEPT_HEADERS if name in headers}


def get(port: int, path: str, token: str | None, method: str = "GET") -> tuple:
    http = Http(port)
    status, headers, body = http.request(method, path, headers_for(token=token, content_type=None))
    return status, kept(headers), body


def image_task(port: int, token: str | None) -> tuple[str, str]:
    """(task id, sha256) of a finished `/scenario image` task created by `token`."""
    with SSEStream(port, SSM, user_message("/scenario image"), activate=True, token=token) as stream:
        events = stream.read_until(lambda e: describe(e).startswith("completed"))
    frame = next(item(e).frame for e in events if describe(e) == "artifact")
    attachment = frame["attachments"][0]
    return attachment["url"].split("/")[2], attachment["sha256"]


def finished_task(port: int, token: str | None, text: str = "hello") -> str:
    task_id = rpc(port, "SendMessage", user_message(text), token=token)[2]["result"]["task"]["id"]
    wait_for(lambda: rpc(port, "GetTask", {"id": task_id}, token=token)[2]["result"]["status"]["state"]
             == "TASK_STATE_COMPLETED", what="the task to finish")
    return task_id


def attachment_answers(port: int, door: bool) -> dict[str, tuple]:
    """Every row of the spec's Attachment bytes table, asked of the gateway at `port`."""
    me, other = (ALICE, BOB) if door else (None, None)
    mine, sha = image_task(port, me)
    theirs, _ = image_task(port, other)
    plain = finished_task(port, me)
    url = f"/attachments/{mine}/{sha}"
    answers = {
        "the caller's task and its image": get(port, url, me),  # first: B caches these bytes
        "a task no one holds, with that image's hash": get(port, f"/attachments/{unknown_like(mine)}/{sha}", me),
        "a task of the caller's that returned no image": get(port, f"/attachments/{plain}/{sha}", me),
        "the other caller's own image": get(port, f"/attachments/{theirs}/{sha}", other),  # now cached on B
        "another caller's task (unseen behind a door)": get(port, f"/attachments/{theirs}/{sha}", me),
        "a hash no call returned": get(port, f"/attachments/{mine}/{'0' * 64}", me),
        "a hash that is not one": get(port, f"/attachments/{mine}/{sha.upper()}", me),
        "an id with characters a path would change": get(
            port, f"/attachments/{urllib.parse.quote(mine + '?x y#', safe='')}/{sha}", me),
        "the image again": get(port, url, me),
    }
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        answers[method] = get(port, url, me, method)
    if door:
        answers["no token"] = get(port, url, None)
        answers["a token the door does not know"] = get(port, url, "not-a-token")
        answers["a token without GetTask"] = get(port, url, NARROW)
    return answers


@pytest.mark.parametrize("door", [False, True], ids=["public", "door"])
def test_b_answers_every_attachment_row_as_a(tmp_path, door):
    with a_and_b(tmp_path, door) as (a, b):
        on_a, on_b = attachment_answers(a.port, door), attachment_answers(b.port, door)
    assert on_b == on_a
    status, headers, body = on_a["the caller's task and its image"]
    assert status == 200 and headers["content-type"] == "image/png" and body.startswith(b"\x89PNG")
    assert on_a["a task no one holds, with that image's hash"] == (404, {"content-length": "0",
                                                                         "x-content-type-options": "nosniff"}, b"")
    assert on_a["a task of the caller's that returned no image"][0] == 404
    assert on_a["the other caller's own image"] == on_a["the caller's task and its image"]
    assert on_a["another caller's task (unseen behind a door)"][0] == (404 if door else 200)
    assert on_a["POST"][:2] == (405, {"allow": "GET", "content-length": "0", "x-content-type-options": "nosniff"})
    if door:
        assert [on_a[k][0] for k in ("no token", "a token the door does not know", "a token without GetTask")] \
            == [401, 401, 403]


def by_label(answer: tuple, ids: dict[str, str]) -> tuple:
    status, headers, body = answer
    for task_id, label in ids.items():
        body = body.replace(task_id.encode(), label.encode())
    return status, {k: v for k, v in headers.items() if k != "content-length"}, orjson.loads(body) if body else None


def call(port: int, method: str, params: dict, token: str | None) -> tuple:
    http = Http(port)
    status, headers, body = http.request("POST", "/", headers_for(token=token), orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
    return status, kept(headers), body


def refusal_answers(port: int, door: bool) -> dict[str, tuple]:
    """The JSON-RPC refusals whose words are the capsule's, asked of the gateway at `port`."""
    me = ALICE if door else None
    ended = finished_task(port, me)
    ids = {ended: "<ended>", unknown_like(ended): "<unknown>"}
    cases = {
        "SubscribeToTask, an ended task": (SUB, {"id": ended}),
        "SubscribeToTask, no such task": (SUB, {"id": unknown_like(ended)}),
        "SubscribeToTask, an empty id": (SUB, {"id": ""}),
        "GetTask, an empty id": ("GetTask", {"id": ""}),
        "GetTask, a number for an id": ("GetTask", {"id": 5}),
        "CancelTask, an ended task": ("CancelTask", {"id": ended}),
        "SendMessage, a reply to an ended task": ("SendMessage", user_message("more", taskId=ended)),
        "SendStreamingMessage, a reply to an ended task": (SSM, user_message("more", taskId=ended)),
        "SendMessage, no message": ("SendMessage", {}),
        "a push config method": ("GetTaskPushNotificationConfig", {"id": ended}),
        "ListTasks, pageSize 0": ("ListTasks", {"pageSize": 0}),
        "ListTasks, a token no listing issued": ("ListTasks", {"pageToken": "next"}),
    }
    if not door:
        cases["GetExtendedAgentCard on a public door"] = ("GetExtendedAgentCard", {})
    return {label: by_label(call(port, method, params, me), ids) for label, (method, params) in cases.items()}


@pytest.mark.parametrize("door", [False, True], ids=["public", "door"])
def test_b_refuses_as_a_does(tmp_path, door):
    with a_and_b(tmp_path, door) as (a, b):
        on_a, on_b = refusal_answers(a.port, door), refusal_answers(b.port, door)
    assert on_b == on_a
    assert on_a["SubscribeToTask, an ended task"][2]["error"]["code"] == -32004
    assert on_a["CancelTask, an ended task"][2]["error"]["code"] == -32002


def test_a_message_answer_passes_through_b(tmp_path):
    message = {**user_message("hi"),
               "message": {**user_message("hi")["message"], "messageId": "tck-message-response-1"}}
    with a_and_b(tmp_path, False) as (a, b):
        on_a = rpc(a.port, "SendMessage", message)[2]["result"]
        on_b = rpc(b.port, "SendMessage", message)[2]["result"]
        assert set(on_a) == set(on_b) == {"message"}
        assert on_a["message"]["parts"] == on_b["message"]["parts"]
        with SSEStream(b.port, SSM, message) as stream:  # streamed, it is a task that completes
            events = stream.read_until(lambda e: describe(e).startswith("completed"))
        assert item(events[0]).kind == "task"


def no_task_answers(port: int, door: bool) -> dict[str, tuple]:
    me = ALICE if door else None
    kept_task = rpc(port, "SendMessage", user_message("hello"), token=me)[2]["result"]["task"]["id"]
    cases = {
        "SendStreamingMessage, a new task": (SSM, user_message("hello")),
        "SubscribeToTask, a task it holds": (SUB, {"id": kept_task}),
        "SubscribeToTask, no such task": (SUB, {"id": "tsk_none"}),
    }
    return {label: by_label(call(port, method, params, me), {kept_task: "<task>"})
            for label, (method, params) in cases.items()}


@pytest.mark.parametrize("door", [False, True], ids=["public", "door"])
def test_b_streams_nothing_when_a_takes_no_tasks(tmp_path, door):
    with a_and_b(tmp_path, door, '[lifecycle]\ntask_acceptance = "none"\n') as (a, b):
        on_a, on_b = no_task_answers(a.port, door), no_task_answers(b.port, door)
        cards = [orjson.loads(Http(gw.port).request("GET", "/.well-known/agent-card.json")[2]) for gw in (a, b)]
    assert on_b == on_a
    for status, headers, body in on_a.values():
        assert status == 200 and headers["content-type"] == "application/json"
        assert body["error"]["code"] == -32004
    assert cards[0]["capabilities"]["streaming"] is cards[1]["capabilities"]["streaming"] is False


def test_extended_card_through_b_names_b(tmp_path):
    with a_and_b(tmp_path, True) as (a, b):
        on_a = rpc(a.port, "GetExtendedAgentCard", {}, token=ALICE)[2]["result"]
        on_b = rpc(b.port, "GetExtendedAgentCard", {}, token=ALICE)[2]["result"]
    # each names the address its client reached (never a Host header), the rest is A's card
    assert [i["url"] for i in on_b["supportedInterfaces"]] == [f"http://127.0.0.1:{b.port}/"]
    assert upstream_card(on_b) == upstream_card(on_a)


@pytest.mark.parametrize("door_on", ["A", "B"])
def test_b_card_declares_bs_own_door(tmp_path, door_on):
    tokens = tmp_path / "door.toml"
    tokens.write_text(token_table(RULES))
    public = tmp_path / "public.toml"
    public.write_text("")
    config_a, config_b = (tokens, public) if door_on == "A" else (public, tokens)
    link = ["--upstream-token", LINK] if door_on == "A" else []
    with running_gateway("--config", str(config_a), tmp_path=tmp_path) as a, \
            front_of(a, tmp_path, "--config", str(config_b), *link) as b:
        card_a, card_b = (orjson.loads(Http(gw.port).request("GET", "/.well-known/agent-card.json")[2])
                          for gw in (a, b))
        status, _, _ = rpc(b.port, "GetTask", {"id": "tsk_none"})
    assert ("securitySchemes" in card_b) == (door_on == "B") == (status == 401)
    assert ("securitySchemes" in card_a) == (door_on == "A")
    strip = ("securitySchemes", "securityRequirements")
    assert ({k: v for k, v in upstream_card(card_b).items() if k not in strip}
            == {k: v for k, v in upstream_card(card_a).items() if k not in strip})
    assert card_b["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{b.port}/"


def test_an_attachment_b_cannot_ask_a_for_is_503_not_404(tmp_path):
    with a_and_b(tmp_path, False) as (a, b):
        task_id, sha = image_task(b.port, None)
        cached = get(b.port, f"/attachments/{task_id}/{sha}", None)
        a.stop()
        wait_for(lambda: rpc(b.port, "GetTask", {"id": task_id})[2].get("error"), what="B to lose A")
        assert get(b.port, f"/attachments/{task_id}/{sha}", None) == cached  # A served these bytes
        status, headers, body = Http(b.port).request("GET", f"/attachments/{task_id}/{'1' * 64}")
    assert cached[0] == 200
    assert status == 503 and headers["retry-after"] == "1"
    assert orjson.loads(body)["detail"] == "the upstream capsule is unreachable"


def listing(port: int) -> list[tuple]:
    """Alice's tasks, two a page, while bob's are interleaved with hers."""
    labels = {}
    for n in range(5):
        owner = ALICE if n % 2 == 0 else BOB
        labels[finished_task(port, owner, f"task {n}")] = f"<task {n}>"
    pages, token = [], ""
    while True:
        params = {"pageSize": 2, **({"pageToken": token} if token else {})}
        status, _, body = by_label(call(port, "ListTasks", params, ALICE), labels)
        result = body["result"]  # the tasks by label: their other ids and times are each gateway's own
        pages.append((status, [t["id"] for t in result["tasks"]], result["pageSize"], result["totalSize"]))
        token = result["nextPageToken"]
        pages.append(token and "<more>")
        if not token or len(pages) > 5:
            return pages


def test_b_pages_a_callers_own_tasks_as_a_does(tmp_path):
    with a_and_b(tmp_path, True) as (a, b):
        on_a, on_b = listing(a.port), listing(b.port)
    assert on_b == on_a == [(200, ["<task 4>", "<task 2>"], 2, 3), "<more>", (200, ["<task 0>"], 2, 3), ""]


def test_b_acks_a_watcher_with_as_conversation_mode(tmp_path):
    config = tmp_path / "threaded.toml"
    config.write_text('[lifecycle]\nconversation = "threaded"\n')
    with running_gateway("--config", str(config), tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        acks = []
        for gw in (a, b):
            with SSEStream(gw.port, "murmur.WatchSession", {}) as watcher:
                acks.append(item(watcher.next()).frame)
    assert acks[1] == acks[0] == {"frame": "connection-ack", "role": "observer", "conversationMode": "threaded"}


def streamed(port: int, params: dict) -> list[str]:
    """The stream's events in words, its opening task by its state."""
    with SSEStream(port, SSM, params, activate=True) as stream:
        events = stream.read_until(lambda e: describe(e).startswith("completed"))
    return [item(events[0]).body["status"]["state"]] + [describe(e) for e in events[1:]]


def test_a_tck_task_streams_through_b_as_through_a(tmp_path):
    message = {**user_message("hi"), "message": {**user_message("hi")["message"], "messageId": "tck-stream-001-1"}}
    with a_and_b(tmp_path, False) as (a, b):
        on_a, on_b = streamed(a.port, message), streamed(b.port, message)
    assert on_b == on_a
    assert on_a[0] == "TASK_STATE_SUBMITTED" and on_a[-1] == "completed:task completed"


def test_a_link_token_the_upstream_refuses_is_worded_for_bs_client(tmp_path):
    """A's 403 is about B's token, not the client's: the client reads that the upstream refused
    the gateway's credentials, and A's own wording is in B's log only."""
    tokens = tmp_path / "door.toml"
    tokens.write_text(token_table(RULES))
    with running_gateway("--config", str(tokens), tmp_path=tmp_path) as a, \
            front_of(a, tmp_path, "--upstream-token", WATCHER) as b:  # its link holds, GetTask is refused
        error = rpc(b.port, "GetTask", {"id": "tsk_none"})[2]["error"]
        logged = [r for r in b.logs() if r.get("event") == "upstream refused the gateway's credentials"]
    assert (error["code"], error["message"]) == (-32603, "the upstream refused the gateway's credentials")
    assert logged[0]["status"] == 403 and "the token does not hold the GetTask scope" in logged[0]["answer"]


@pytest.mark.parametrize("code, relayed_as", [(-32001, -32001), (-32001.0, -32603), ("-32001", -32603), (True, -32603)])
def test_an_upstream_error_code_is_relayed_only_when_it_is_one_of_ours_as_an_integer(code, relayed_as):
    """A float or text code would reach the client as a non-integer code and miss every
    murgw_jsonrpc_errors_total label."""
    from gateway.sequencer.capsule.upstream_errors import relayed
    from gateway.protocol.errors import RpcError

    with pytest.raises(RpcError) as raised:
        relayed("GetTask", 200, orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "m"}}))
    assert type(raised.value.code) is int and raised.value.code == relayed_as
