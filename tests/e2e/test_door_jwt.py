"""JWT bearer tokens at the door ([network.authentication.jwt], gateway/worker/door/jwt/),
end to end on a real gateway: a good token opens a stream, every bad one is answered exactly as
an unknown token, the scope is the method's, `sub` is the caller; and a stream ends when its
token expires, a JWT's `exp` or a static token's `expires`, as a revocation does."""

from __future__ import annotations

import datetime
import math
import os
import signal
import time

import orjson
import pytest

from gateway.worker.door.auth import SUB_CLASH
from helpers.gateway_harness import GatewayOptions, running_gateway, scrape, token_table, wait_for
from helpers.http_client import Http, problem_detail, rpc, user_message
from helpers.jwt_tokens import AUDIENCE, ISSUER, WATCH, KeyPair, hand_made, jwt_table, standard_claims
from helpers.sse_reading import SSEStream, watch

KEYS, OTHER_KEYS = KeyPair(), KeyPair()
OWN = "SendMessage GetTask ListTasks"


@pytest.fixture(scope="module")
def gateway_options(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jwt")
    (folder / "jwt.pem").write_bytes(KEYS.public_pem)
    config = folder / "door.toml"
    config.write_text(jwt_table(folder / "jwt.pem") + token_table([("ops", "ops-token-1", ["*"])]))
    return GatewayOptions("--config", str(config), workers=1)


def unknown_token_answer(port: int, method: str = "ListTasks") -> tuple[int, dict, dict]:
    status, headers, body = rpc(port, method, {}, token="not-a-token")
    assert status == 401
    return status, headers, body


def test_a_good_jwt_opens_a_watch_stream_with_its_connection_ack(gateway):
    """[claim: jwt-verified]"""
    assert rpc(gateway.port, "ListTasks", {}, token=KEYS.mint(scope="ListTasks"))[0] == 200
    with watch(gateway.port, token=KEYS.mint()) as stream:  # watch() asserts 200 and the connection-ack
        assert stream.headers["content-type"] == "text/event-stream"
    banner = next(r for r in gateway.logs() if r.get("event") == "listening")
    assert banner["door"] == "1 token, jwt ES256"


BAD_TOKENS = {
    "signed with another key": lambda: OTHER_KEYS.mint(),
    "expired": lambda: KEYS.mint(expires_in=-5),
    "another audience": lambda: KEYS.mint(aud="another-service"),
    "another issuer": lambda: KEYS.mint(iss="https://evil.example"),
    "not yet valid (nbf)": lambda: KEYS.mint(nbf=int(time.time()) + 600),
    "no exp": lambda: KEYS.mint(exp=None),
    "no sub": lambda: KEYS.mint(sub=None),
    "alg none": lambda: hand_made({"alg": "none", "typ": "JWT"}, standard_claims(), None),
    # The algorithm confusion attack: HS256 keyed with the gateway's own public key.
    "HS256 where ES256 is configured": lambda: hand_made({"alg": "HS256", "typ": "JWT"}, standard_claims(),
                                                         KEYS.public_pem),
    "a signature cut off": lambda: KEYS.mint().rpartition(".")[0] + ".",
}


@pytest.mark.parametrize("why", list(BAD_TOKENS))
@pytest.mark.parametrize("method", [WATCH, "ListTasks"])
def test_a_jwt_failing_any_check_is_answered_as_an_unknown_token(gateway, why, method):
    """[claim: jwt-verified] The same 401, headers and body, as a token the door never knew."""
    status, headers, body = rpc(gateway.port, method, {}, token=BAD_TOKENS[why]())
    unknown = unknown_token_answer(gateway.port, method)
    assert (status, headers, body) == unknown
    assert problem_detail(401, headers, body) == "the bearer token is not valid for this door"


@pytest.mark.parametrize("scope", ["ListTasks", "", "murmur.WatchSessionX other:scope"])
def test_a_jwt_without_the_methods_scope_is_403(gateway, scope):
    """[claim: jwt-scope]"""
    status, headers, body = rpc(gateway.port, WATCH, {}, token=KEYS.mint(scope=scope))
    assert status == 403
    assert problem_detail(403, headers, body) == f"the token does not hold the {WATCH} scope"


def test_a_star_scope_reaches_every_method(gateway):
    """[claim: jwt-scope]"""
    assert rpc(gateway.port, "ListTasks", {}, token=KEYS.mint(scope="*"))[0] == 200


def test_sub_is_the_caller_who_owns_tasks_and_names_the_access_line(gateway):
    """[claim: jwt-scope] Two tokens of one `sub` are one caller; another `sub` sees nothing of its tasks."""
    status, _, body = rpc(gateway.port, "SendMessage", user_message("hello"),
                          token=KEYS.mint(sub="carol", scope=OWN))
    task_id = body["result"]["task"]["id"]
    again = rpc(gateway.port, "GetTask", {"id": task_id}, token=KEYS.mint(sub="carol", scope=OWN))
    other = rpc(gateway.port, "GetTask", {"id": task_id}, token=KEYS.mint(sub="dan", scope=OWN))
    assert again[2]["result"]["id"] == task_id
    assert other[2]["error"]["code"] == -32001
    lines = [r for r in gateway.logs() if r.get("event") == "request" and r.get("method") == "SendMessage"]
    assert lines[-1]["caller"] == "carol"


def test_the_max_streams_claim_limits_the_callers_open_streams(gateway):
    """[claim: jwt-scope]"""
    token = KEYS.mint(sub="erin", max_streams=1)
    with watch(gateway.port, token=token):
        over = SSEStream(gateway.port, WATCH, {}, token=KEYS.mint(sub="erin", max_streams=1))
        assert over.status == 429
        over.close()


def test_a_jwt_whose_sub_is_a_static_tokens_name_is_an_unknown_token(gateway):
    """[claim: jwt-sub-not-static] A JWT with sub "ops", where the static token `ops` is
    declared, is the same 401 as an unknown token (so it can neither see `ops`'s tasks nor
    draw on its stream places); one warning names the clash, never the token. Another `sub`
    with the same key and scope opens."""
    status, _, body = rpc(gateway.port, "SendMessage", user_message("ops's own"), token="ops-token-1")
    assert status == 200
    task_id = body["result"]["task"]["id"]
    clash = KEYS.mint(sub="ops", scope="*")
    for method, params in ((WATCH, {}), ("ListTasks", {}), ("GetTask", {"id": task_id})):
        assert rpc(gateway.port, method, params, token=clash)[:3] == unknown_token_answer(gateway.port, method)
    assert rpc(gateway.port, "ListTasks", {}, token=KEYS.mint(sub="alice", scope="*"))[0] == 200
    assert rpc(gateway.port, "GetTask", {"id": task_id}, token="ops-token-1")[2]["result"]["id"] == task_id
    warnings = wait_for(lambda: [r for r in gateway.logs() if r.get("event") == SUB_CLASH] or None,
                        what="the clash's warning")
    assert all(r["level"] == "warning" and r["sub"] == "ops" for r in warnings)
    assert clash not in gateway.stderr() and clash.rpartition(".")[2] not in gateway.stderr()


READ_DEADLINE = 60.0  # generous: expiry must end the stream long before; if it never does, fail


def read_to_end(stream: SSEStream) -> float:
    """When the server ended the stream (its last chunk read); AssertionError if it has not
    ended within READ_DEADLINE (heartbeats keep the socket's own timeout from firing)."""
    deadline = time.monotonic() + READ_DEADLINE
    while stream.next() is not None:
        assert time.monotonic() < deadline, f"the stream did not end within {READ_DEADLINE:g} s"
    return time.time()


def stream_ends(gateway, caller: str) -> list[dict]:
    return [r for r in gateway.logs() if r.get("event") == "stream end" and r.get("caller") == caller]


def test_a_stream_ends_when_its_jwt_expires_worded_as_a_revocation(gateway):
    """[claim: token-expiry] A stream opened with a JWT that expires in 3 s ends at its `exp`,
    never before, after whole events, its access line's reason "expired"; the token is 401 after."""
    expires = math.ceil(time.time()) + 3  # whole seconds, as `exp` is: never less than 3 s away
    token = KEYS.mint(sub="frank", exp=expires)
    with watch(gateway.port, token=token, last_event_id=str(2**40), timeout=READ_DEADLINE) as stream:
        ended = read_to_end(stream)
        assert stream.ended and bytes(stream.raw).endswith(b"\n\n")
    assert ended >= expires  # never before; the reason "expired" says expiry, not our deadline, ended it
    line = wait_for(lambda: next(iter(stream_ends(gateway, "frank")), None), what="its access line")
    assert line["reason"] == "expired"
    assert rpc(gateway.port, "ListTasks", {}, token=token)[:3] == unknown_token_answer(gateway.port)


def toml_datetime(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(int(seconds), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_static_token_with_expires_ends_its_streams_then_and_is_401_after(tmp_path):
    """[claim: token-expiry] A token whose `expires` a reload brings to 6 s from now: the stream
    opened before (its expiry moved) and one opened after (its expiry set at opening) both end
    then, never before, reason "expired"; after it the token is answered as an unknown one."""
    door = tmp_path / "door.toml"
    rule = [("gina", "gina-token-1", ["*"])]
    door.write_text(token_table(rule) + f"expires = {toml_datetime(time.time() + 3600)}\n")
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        early = watch(gw.port, token="gina-token-1", last_event_id=str(2**40), timeout=READ_DEADLINE)
        try:
            expires = int(time.time()) + 6
            door.write_text(token_table(rule) + f"expires = {toml_datetime(expires)}\n")
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: any(r.get("event") == "reloaded settings applied" for r in gw.logs()),
                     what="the reload applied")
            with watch(gw.port, token="gina-token-1", last_event_id=str(2**40), timeout=READ_DEADLINE) as late:
                ends = [read_to_end(early), read_to_end(late)]
                assert all(s.ended and bytes(s.raw).endswith(b"\n\n") for s in (early, late))  # whole events
            assert min(ends) >= expires  # never before; the reasons below say expiry ended them
            lines = wait_for(lambda: len(stream_ends(gw, "gina")) == 2 and stream_ends(gw, "gina"),
                             what="both access lines")
            assert [line["reason"] for line in lines] == ["expired", "expired"]
            assert rpc(gw.port, "ListTasks", {}, token="gina-token-1")[:3] == unknown_token_answer(gw.port)
        finally:
            early.close()


def test_a_token_expired_at_start_is_401(tmp_path):
    """[claim: token-expiry]"""
    door = tmp_path / "door.toml"
    door.write_text(token_table([("old", "old-token-1", ["*"]), ("new", "new-token-1", ["*"])])
                    .replace('scopes = ["*"]\n', f'scopes = ["*"]\nexpires = {toml_datetime(time.time() - 60)}\n', 1))
    with running_gateway("--config", str(door), workers=1, tmp_path=tmp_path) as gw:
        assert rpc(gw.port, "ListTasks", {}, token="new-token-1")[0] == 200
        assert rpc(gw.port, "ListTasks", {}, token="old-token-1")[:3] == unknown_token_answer(gw.port)


def test_sighup_reloads_the_key_file_and_a_key_that_does_not_load_changes_nothing(tmp_path):
    """[claim: jwt-key-reload] New tokens verify with the new key at once, the old key's are
    401; a stream opened with the old key goes on to its `exp`. A file that holds no key
    rejects the reload and the key in use stays. A reload that removes the table ends the
    streams its tokens opened, as a removed token's."""
    key = tmp_path / "jwt.pem"
    key.write_bytes(KEYS.public_pem)
    door = tmp_path / "door.toml"
    door.write_text(jwt_table(key))
    with running_gateway("--config", str(door), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        def reloads() -> tuple[float, float]:
            samples = scrape(gw.metrics_port)
            return (samples['murgw_config_reloads_total{outcome="applied"}'],
                    samples['murgw_config_reloads_total{outcome="rejected"}'])

        before = watch(gw.port, token=KEYS.mint(sub="hal"))
        try:
            key.write_bytes(OTHER_KEYS.public_pem)
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads() == (1, 0), what="the reload applied")
            wait_for(lambda: rpc(gw.port, "ListTasks", {}, token=OTHER_KEYS.mint(scope="ListTasks"))[0] == 200,
                     what="the worker verifying with the new key")
            assert rpc(gw.port, "ListTasks", {}, token=KEYS.mint(scope="ListTasks"))[0] == 401
            applied = time.time()  # still streaming (its heartbeats) a second after the reload
            wait_for(lambda: before.next() is not None and time.time() > applied + 1, what="heartbeats")
            assert not stream_ends(gw, "hal")

            key.write_text("-----BEGIN PUBLIC KEY-----\nhalf written\n")
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads() == (1, 1), what="the broken key rejected")
            problem = next(r for r in gw.logs() if r.get("event") == "config reload rejected; nothing changed")
            assert "key_file" in problem["problem"]
            assert rpc(gw.port, "ListTasks", {}, token=OTHER_KEYS.mint(scope="ListTasks"))[0] == 200

            door.write_text(token_table([("ops", "ops-token-1", ["*"])]))
            os.kill(gw.pid, signal.SIGHUP)
            wait_for(lambda: reloads() == (2, 1), what="the table removed")
            read_to_end(before)
            line = wait_for(lambda: next(iter(stream_ends(gw, "hal")), None), what="its access line")
            assert line["reason"] == "revoked"
            assert rpc(gw.port, "ListTasks", {}, token=OTHER_KEYS.mint(scope="ListTasks"))[0] == 401
        finally:
            before.close()


def test_the_claims_are_checked_as_configured_without_issuer_or_audience(tmp_path):
    """[claim: jwt-verified] No `issuer`: any `iss` passes. No `audience`: a token that names
    one is refused (RFC 7519 4.1.3), one that names none passes. A door of JWTs alone asks
    for a bearer token in its card, as one with static tokens does."""
    key = tmp_path / "jwt.pem"
    key.write_bytes(KEYS.public_pem)
    door = tmp_path / "door.toml"
    door.write_text(jwt_table(key, issuer=False, audience=False))
    with running_gateway("--config", str(door), workers=1, tmp_path=tmp_path) as gw:
        assert rpc(gw.port, "ListTasks", {}, token=KEYS.mint(scope="ListTasks", aud=None, iss="any"))[0] == 200
        assert rpc(gw.port, "ListTasks", {}, token=KEYS.mint(scope="ListTasks", aud=AUDIENCE))[0] == 401
        assert rpc(gw.port, "ListTasks", {}, token=KEYS.mint(scope="ListTasks", aud=None, iss=ISSUER))[0] == 200
        assert unknown_token_answer(gw.port)[0] == 401
        card = orjson.loads(Http(gw.port).request("GET", "/.well-known/agent-card.json")[2])
        assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
        assert card["capabilities"]["extendedAgentCard"] is True
