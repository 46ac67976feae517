"""Why a JWT was refused, for the operator, and never for the client; and a JWKS key file.

A gateway whose `key_file` is a JWKS of two ES256 keys (a rotation's old and new): tokens of
both open streams, a token whose `kid` names neither is refused. Each `token_problem` comes
from a token made to have it, and each is answered with the very bytes of an unknown token's
401 (on HTTP/1.1, raw; on HTTP/2, its status, headers and body), while the access line says
the problem and `murgw_tokens_refused_total{problem}` counts it. The payloads a signature
does not make sound (issue 47: an `exp` beyond a double, a string `exp`, a lone surrogate in
`sub`, a member twice) are each refused so, never a 500."""

from __future__ import annotations

import time

import httpx
import pytest

from helpers.gateway_harness import GatewayOptions, scrape, wait_for
from helpers.jwt_tokens import WATCH, KeyPair, hand_made, jwks, jwt_table, standard_claims
from helpers.raw_http import post, until_close
from helpers.sse_reading import watch

OLD, NEW = KeyPair("2026-05"), KeyPair("2026-06")
STRANGER = KeyPair("2026-05")  # names OLD's kid, signs with another key


@pytest.fixture(scope="module")
def gateway_options(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jwks")
    (folder / "jwks.json").write_bytes(jwks(OLD, NEW))
    config = folder / "door.toml"
    config.write_text(jwt_table(folder / "jwks.json"))
    return GatewayOptions("--config", str(config), workers=1, metrics=True)


def answer_bytes(port: int, token: str) -> bytes:
    """Every byte the gateway writes for a ListTasks with `token`, on HTTP/1.1."""
    return until_close(port, post("ListTasks", {}, headers=f"Authorization: Bearer {token}\r\nConnection: close\r\n"
                                  .encode()))


UNKNOWN_401 = (b'{"type":"about:blank","title":"Unauthorized","status":401,'
               b'"detail":"the bearer token is not valid for this door"}')


def test_tokens_of_both_keys_of_the_set_open_streams(gateway):
    """[claim: jwt-key-set]"""
    for pair in (OLD, NEW):
        with watch(gateway.port, token=pair.mint()) as stream:  # asserts 200 and the connection-ack
            assert stream.headers["content-type"] == "text/event-stream"


def now() -> int:
    return int(time.time())


PROBLEMS = {
    "expired": lambda: NEW.mint(expires_in=-5),
    "not_yet_valid": lambda: NEW.mint(nbf=now() + 600),
    "signature": lambda: STRANGER.mint(),
    "algorithm": lambda: hand_made({"alg": "none", "typ": "JWT", "kid": NEW.kid}, standard_claims(), None),
    "issuer": lambda: NEW.mint(iss="https://evil.example"),
    "audience": lambda: NEW.mint(aud="another-service"),
    "unknown_key": lambda: KeyPair("2024-01").mint(),
    "claims": lambda: NEW.mint(sub=None),
    "malformed": lambda: "not-a-token",
}


def refused_line(gateway, problem: str, before: int) -> dict:
    return wait_for(lambda: next((r for r in gateway.logs()[before:] if r.get("event") == "request"
                                  and r.get("token_problem") == problem), None), what=f"the {problem} line")


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_each_token_problem_is_told_to_the_operator_and_the_client_gets_the_unknown_tokens_bytes(gateway, problem):
    """[claim: token-problem] The raw answer is byte for byte the one to a token the door
    never knew; the access line and the counter name the problem."""
    counter = f'murgw_tokens_refused_total{{problem="{problem}"}}'
    counted = scrape(gateway.metrics_port)[counter]
    before = len(gateway.logs())
    answer = answer_bytes(gateway.port, PROBLEMS[problem]())
    line = refused_line(gateway, problem, before)
    assert (line["status"], line["refusal"]) == (401, "unknown token")
    wait_for(lambda: scrape(gateway.metrics_port)[counter] == counted + 1, what="the problem counted")
    assert answer == answer_bytes(gateway.port, "an-unknown-token")
    assert answer.startswith(b"HTTP/1.1 401 Unauthorized\r\n") and answer.endswith(b"\r\n\r\n" + UNKNOWN_401)


SOUNDLESS = {  # a payload the key signed, whose claims are not what a claim must be
    "exp beyond a double": (b'{"sub":"u","exp":1' + b"0" * 400 + b"}", "malformed"),
    "exp 1e400": (b'{"sub":"u","exp":1e400}', "malformed"),
    "exp as a string": (b'{"sub":"u","exp":"4102444800"}', "claims"),
    "exp true": (b'{"sub":"u","exp":true}', "claims"),
    "exp past year 9999": (b'{"sub":"u","exp":1e300}', "claims"),
    "nbf negative": (b'{"sub":"u","exp":4102444800,"nbf":-1}', "claims"),
    "iat as a string": (b'{"sub":"u","exp":4102444800,"iat":"0"}', "claims"),
    "sub a lone surrogate": (b'{"sub":"\\ud800x","exp":4102444800}', "malformed"),
    "sub twice": (b'{"sub":"alice","sub":"bob","exp":4102444800}', "claims"),
    "sub a number": (b'{"sub":42,"exp":4102444800}', "claims"),
    "payload an array": (b'["sub","exp"]', "malformed"),
    "payload not JSON": (b"sub=alice", "malformed"),
}


def soundless(case: str) -> str:
    payload, _ = SOUNDLESS[case]
    payload = payload[:-1] + b',"iss":"https://app.example","aud":"murmur-gateway","scope":"*"}' \
        if payload.startswith(b"{") else payload
    return NEW.signed(payload)


@pytest.mark.parametrize("case", list(SOUNDLESS))
def test_a_signed_payload_with_unsound_claims_is_the_unknown_tokens_401_on_http1_and_http2(gateway, case):
    """[claim: jwt-claims-checked]"""
    token, problem = soundless(case), SOUNDLESS[case][1]
    before = len(gateway.logs())
    assert answer_bytes(gateway.port, token) == answer_bytes(gateway.port, "an-unknown-token")
    assert refused_line(gateway, problem, before)["status"] == 401
    with httpx.Client(http1=False, http2=True) as client:
        answers = [client.post(f"http://127.0.0.1:{gateway.port}/", content=b'{"jsonrpc":"2.0","id":1,'
                               b'"method":"ListTasks","params":{}}',
                               headers={"content-type": "application/json", "a2a-version": "1.0",
                                        "authorization": f"Bearer {bearer}"}) for bearer in (token, "unknown")]
    assert all(a.http_version == "HTTP/2" for a in answers)
    assert [(a.status_code, a.headers.multi_items(), a.content) for a in answers][0] == \
        [(a.status_code, a.headers.multi_items(), a.content) for a in answers][1]
    assert answers[0].content == UNKNOWN_401
    assert not [r for r in gateway.logs() if r.get("status") == 500]


def test_the_sound_payload_of_those_cases_opens(gateway):
    """The payload the cases above spoil, signed the same way, opens: they fail on their claim."""
    token = NEW.signed(b'{"sub":"u","exp":4102444800,"iss":"https://app.example","aud":"murmur-gateway",'
                       b'"scope":"' + WATCH.encode() + b'"}')
    with watch(gateway.port, token=token):
        pass
