"""murgw.WatchOwnTasks end to end: a watcher of its caller's own tasks (README, "A caller's own
tasks"), the gateway's extension, never a loosening of murmur.WatchSession.

One gateway, four static tokens: alice and bob hold the task methods and WatchOwnTasks, as a
per-user token should; ops holds murmur.WatchSession (and so sees every task) but not
WatchOwnTasks; narrow holds GetTask alone. Bob's task runs while alice watches; alice's
stream, live or replayed from 0, carries her tasks and the frames of no task, never a byte
of bob's; so does a JWT minted with the scope docs/operations.md gives a user, and so does
the stream over HTTP/2; a reload that takes its scope away ends it. A public door's stream
carries every task; upstream mode refuses it.
"""

from __future__ import annotations

import ast
import os
import re
import signal
from pathlib import Path

import orjson
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format

from gateway.protocol.uris import OWN_TASKS_URI, STREAM_URI
from helpers.gateway_harness import GatewayOptions, front_of, running_gateway, scrape, token_table, wait_for
from helpers.http_client import Http, headers_for, problem_detail, rpc, rpc_body, user_message
from helpers.jwt_tokens import KeyPair, jwt_table
from helpers.sse_reading import SSEStream, is_terminal_event, item, task_id_of
from helpers.tls_support import H2Connection

OWN = "murgw.WatchOwnTasks"
WATCH = "murmur.WatchSession"
ALICE, BOB, OPS, NARROW = "alice-1b2c3d", "bob-4e5f6a", "ops-7b8c9d", "narrow-0e1f2a"
PER_USER = ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "SubscribeToTask", OWN]
RULES = [("alice", ALICE, PER_USER), ("bob", BOB, PER_USER),
         ("ops", OPS, [WATCH, "GetTask", "murmur.StopSession"]), ("narrow", NARROW, ["GetTask"])]
BOB_SECRET = "bob secret plan"
KEYS = KeyPair()
OPERATIONS_MD = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture(scope="module")
def gateway_options(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    (folder / "jwt.pem").write_bytes(KEYS.public_pem)
    config = folder / "own.toml"
    config.write_text(jwt_table(folder / "jwt.pem") + token_table(RULES))
    return GatewayOptions("--config", str(config))


def documented_user_scope() -> str:
    """The `scope` claim docs/operations.md has a backend mint for a user (its PyJWT sample)."""
    (sample,) = [block for block in re.findall(r"```python\n(.*?)```", OPERATIONS_MD.read_text(), re.DOTALL)
                 if "jwt.encode(" in block]
    claims = ast.parse(sample).body[0].value.args[0]
    return ast.literal_eval(claims.values[[ast.literal_eval(k) for k in claims.keys].index("scope")])


def create(port: int, token: str, text: str) -> str:
    status, _, body = rpc(port, "SendMessage", user_message(text), token=token)
    assert status == 200 and "result" in body, body
    return body["result"]["task"]["id"]


def own_stream(port: int, token: str = ALICE, **kw) -> SSEStream:
    """Its caller's own-tasks stream, its head and connection-ack read."""
    stream = SSEStream(port, OWN, {}, token=token, **kw)
    assert stream.status == 200, stream.http.read_body()
    assert item(stream.next()).frame["frame"] == "connection-ack"
    return stream


def ran_to_the_end(port: int, task_id: str) -> list:
    """Every event of `task_id` up to its terminal status, read on ops' murmur.WatchSession."""
    with SSEStream(port, WATCH, {}, token=OPS, last_event_id="0") as watcher:
        return [e for e in watcher.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))]


def frame_names(events) -> list[str]:
    return [item(e).frame["frame"] for e in events if item(e).frame is not None and e.id is None]


def test_the_head_names_the_extension_and_the_stream(gateway):
    with own_stream(gateway.port) as stream:
        assert stream.headers["content-type"] == "text/event-stream"
        assert stream.headers["a2a-extensions"] == f"{OWN_TASKS_URI}, {STREAM_URI}"


def test_alice_sees_her_task_live_and_never_bobs(gateway):
    """[claim: own-tasks-stream]"""
    with own_stream(gateway.port, last_event_id=str(2**40)) as alices:
        bobs = create(gateway.port, BOB, BOB_SECRET)
        ran_to_the_end(gateway.port, bobs)  # bob's events are in the ring before alice's task starts
        hers = create(gateway.port, ALICE, "alice plan")
        seen = alices.read_until(lambda e: task_id_of(e) == hers and is_terminal_event(e))
    assert bobs.encode() not in alices.raw and BOB_SECRET.encode() not in alices.raw
    # Her task's events are exactly the ones a WatchSession gets, byte for byte, in order.
    every = [(e.id, e.data) for e in ran_to_the_end(gateway.port, hers) if task_id_of(e) == hers]
    assert [(e.id, e.data) for e in seen if e.id is not None] == every


def test_a_replay_from_0_shows_alice_none_of_bobs_events(gateway):
    """[claim: own-tasks-stream]"""
    bobs = create(gateway.port, BOB, BOB_SECRET)
    hers = create(gateway.port, ALICE, "alice again")
    assert ran_to_the_end(gateway.port, bobs)  # a WatchSession token still sees every task
    every = [(e.id, e.data) for e in ran_to_the_end(gateway.port, hers) if task_id_of(e) == hers]
    with own_stream(gateway.port, last_event_id="0") as alices:
        seen = alices.read_until(lambda e: task_id_of(e) == hers and is_terminal_event(e))
    assert bobs.encode() not in alices.raw and BOB_SECRET.encode() not in alices.raw
    numbered = [e for e in seen if e.id is not None]
    assert [(e.id, e.data) for e in numbered if task_id_of(e) == hers] == every
    assert [e.id for e in numbered] == sorted({e.id for e in numbered})
    # Every event she replays is of a task of hers: GetTask answers it for her, not for bob.
    for task_id in {task_id_of(e) for e in numbered}:
        assert "result" in rpc(gateway.port, "GetTask", {"id": task_id}, token=ALICE)[2], task_id
        assert "error" in rpc(gateway.port, "GetTask", {"id": task_id}, token=BOB)[2], task_id


def test_a_gap_and_heartbeats_reach_her_as_they_reach_every_watcher(gateway):
    with own_stream(gateway.port, last_event_id=str(2**40)) as alices:
        gap = alices.next()
        assert gap.id is None and item(gap).frame["frame"] == "gap"
        while (event := alices.next()).data is not None:  # her replay, then a heartbeat
            assert "result" in rpc(gateway.port, "GetTask", {"id": task_id_of(event)}, token=ALICE)[2]


def test_a_lagging_stream_is_told_what_it_lost(tmp_path):
    rules = token_table([("alice", ALICE, PER_USER)])
    config = tmp_path / "own.toml"
    config.write_text(rules)
    with running_gateway("--config", str(config), tmp_path=tmp_path, workers=1) as gw:
        with own_stream(gw.port, last_event_id=str(2**40), rcvbuf=4096) as slow:
            hers = create(gw.port, ALICE, "/scenario burst n=3000")
            wait_for(lambda: rpc(gw.port, "GetTask", {"id": hers}, token=ALICE)[2]["result"]["status"]["state"]
                     == "TASK_STATE_COMPLETED", what="the burst's end, read by nobody")
            events = slow.read_until(lambda e: task_id_of(e) == hers and is_terminal_event(e))
        lagged = [item(e).frame for e in events if item(e).frame and item(e).frame["frame"] == "lagged"]
        numbered = [e.id for e in events if e.id is not None]
        assert lagged and all(f["missed"] >= 1 for f in lagged)
        assert numbered == sorted(set(numbered))
        assert len(numbered) + sum(f["missed"] for f in lagged) == 3004


@pytest.mark.parametrize("token", [NARROW, OPS])
def test_a_token_without_the_scope_is_refused_403_as_for_every_method(gateway, token):
    """murmur.WatchSession's scope does not open it either: each method needs its own.
    [claim: own-tasks-stream]"""
    status, headers, body = rpc(gateway.port, OWN, {}, token=token)
    assert status == 403
    assert problem_detail(403, headers, body) == f"the token does not hold the {OWN} scope"


def test_no_token_is_401(gateway):
    assert rpc(gateway.port, OWN, {})[0] == 401


def test_a_per_user_token_still_cannot_watch_the_session(gateway):
    """[claim: own-tasks-stream]"""
    status, headers, body = rpc(gateway.port, WATCH, {}, token=ALICE)
    assert status == 403 and problem_detail(403, headers, body) == f"the token does not hold the {WATCH} scope"


def test_the_agent_card_names_the_extension(gateway):
    status, _, body = Http(gateway.port).request("GET", "/.well-known/agent-card.json")
    assert status == 200
    json_format.Parse(body, a2a_pb2.AgentCard(), ignore_unknown_fields=False)
    (extension,) = [e for e in orjson.loads(body)["capabilities"]["extensions"] if e["uri"] == OWN_TASKS_URI]
    assert extension["required"] is False and extension["params"] == {"methods": [OWN]}
    assert OWN in extension["description"]


def test_a_users_jwt_minted_as_the_docs_mint_it_sees_only_its_own_tasks(gateway):
    """The issue's case: carol's token, minted as docs/operations.md mints a user's, neither
    watches the session nor sees alice's text on her own stream. [claim: own-tasks-stream]"""
    scope = documented_user_scope()
    assert OWN in scope.split() and not {WATCH, "*"} & set(scope.split())
    carol = KEYS.mint(sub="carol", scope=scope)
    alices = create(gateway.port, ALICE, "alice secret plan")
    ran_to_the_end(gateway.port, alices)
    assert rpc(gateway.port, WATCH, {}, token=carol)[0] == 403
    with own_stream(gateway.port, token=carol, last_event_id="0") as carols:
        hers = create(gateway.port, carol, "carol plan")
        seen = carols.read_until(lambda e: task_id_of(e) == hers and is_terminal_event(e))
    assert {task_id_of(e) for e in seen if e.id is not None} == {hers}
    assert alices.encode() not in carols.raw and b"alice secret plan" not in carols.raw


def test_over_http2_she_sees_her_task_and_never_bobs(certs, tmp_path):
    config = tmp_path / "own.toml"
    config.write_text(token_table(RULES))
    h1 = certs.client_context(["http/1.1"])

    def call(gw, token: str, method: str, params: dict) -> dict:
        return orjson.loads(Http(gw.port, tls=h1).request("POST", "/", headers_for(token=token),
                                                          rpc_body(method, params))[2])["result"]

    with running_gateway("--config", str(config), *certs.args, tmp_path=tmp_path, tls=certs.client_context(),
                         workers=1) as gw:
        h2 = H2Connection(gw.port, certs.client_context())
        try:
            stream = h2.post(OWN, {}, token=ALICE, last_event_id=str(2**40))
            h2.pump_until(lambda: stream.events, "connection-ack")
            assert stream.status == 200
            assert stream.headers[b"a2a-extensions"] == f"{OWN_TASKS_URI}, {STREAM_URI}".encode()
            bobs = call(gw, BOB, "SendMessage", user_message(BOB_SECRET))["task"]["id"]
            wait_for(lambda: call(gw, BOB, "GetTask", {"id": bobs})["status"]["state"] == "TASK_STATE_COMPLETED",
                     what="bob's task to end")
            hers = call(gw, ALICE, "SendMessage", user_message("alice plan"))["task"]["id"]
            h2.pump_until(lambda: any(e.data and task_id_of(e) == hers and is_terminal_event(e)
                                      for e in stream.events), "her terminal status")
            assert {task_id_of(e) for e in stream.events if e.id is not None} == {hers}
            assert not any(BOB_SECRET in (e.data or "") or bobs in (e.data or "") for e in stream.events)
        finally:
            h2.close()


def test_a_reload_that_takes_the_scope_away_ends_her_stream_and_leaves_bobs(tmp_path):
    """As for every method: a stream whose token lost its method's scope ends at the reload."""
    config = tmp_path / "own.toml"
    config.write_text(token_table(RULES))
    with running_gateway("--config", str(config), tmp_path=tmp_path, metrics=True) as gw:
        with own_stream(gw.port, token=ALICE) as alices, own_stream(gw.port, token=BOB) as bobs:
            less = [(name, token, [s for s in scopes if s != OWN] if name == "alice" else scopes)
                    for name, token, scopes in RULES]
            config.write_text(token_table(less))
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: scrape(gw.metrics_port)['murgw_config_reloads_total{outcome="applied"}'] == 1,
                     what="the reload applied")
            list(alices.events())  # ended, within a heartbeat of the reload
            assert alices.ended and alices.raw.endswith(b"\n\n")
            bob_task = create(gw.port, BOB, "bob goes on")
            assert task_id_of(bobs.read_until(is_terminal_event)[-1]) == bob_task
        assert rpc(gw.port, OWN, {}, token=ALICE)[0] == 403


def test_capsule_closed_ends_her_stream(gateway):
    """Last in the file: it ends the module gateway's session."""
    with own_stream(gateway.port, last_event_id=str(2**40)) as alices:
        assert rpc(gateway.port, "murmur.StopSession", {}, token=OPS)[0] == 200
        rest = list(alices.events())
    assert frame_names(rest)[-1] == "capsule-closed" and alices.ended


def test_a_public_door_shows_every_task_and_upstream_mode_refuses_it(tmp_path):
    """At a public door every task is the one anonymous caller's; upstream, a task's first
    events reach the ring before the upstream names its id, so the method is refused there."""
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        with SSEStream(a.port, OWN, {}, last_event_id=str(2**40)) as anyone:
            task_id = create(a.port, None, "hello")
            assert task_id_of(anyone.read_until(is_terminal_event)[-1]) == task_id
        status, headers, body = rpc(b.port, OWN, {})
        assert status == 200 and headers["content-type"] == "application/json"
        assert body["error"]["code"] == -32004 and "upstream mode" in body["error"]["message"]
        card = orjson.loads(Http(b.port).request("GET", "/.well-known/agent-card.json")[2])
        assert OWN_TASKS_URI not in [e["uri"] for e in card["capabilities"]["extensions"]]
