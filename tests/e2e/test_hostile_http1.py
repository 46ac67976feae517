"""Hostile HTTP/1.1, on the one HTTP/1.1 server (the front, gateway/worker/http/front.py): no
head that two readers could frame or read differently is served, first request or
keep-alive, and nothing pipelined behind it is read; absolute-form targets are served; no h2c
upgrade, whatever --h2c-upgrade says (HTTP/2 is prior knowledge or ALPN `h2` only).

The h2c and the keep-alive-after-a-stream-request's-answer cases also run on a gateway whose
HTTP/2 guarantee does not hold (patches.py's test switch: no HTTP/2 offered)."""

from __future__ import annotations

import re

import orjson
import pytest

from gateway.worker.hypercorn.patches import TEST_SWITCH
from helpers.gateway_harness import GatewayOptions, running_gateway, scrape, series, wait_for
from helpers.http_client import Http, headers_for, rpc_body
from helpers.raw_http import after_an_answer, until_close

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
H2C_UPGRADE = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
# A stream request refused with a JSON-RPC error (-32009: A2A-Version), keeping the connection
WATCH = rpc_body("murmur.WatchSession")
REFUSED_STREAM = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"A2A-Version: 9.0\r\nContent-Length: %d\r\n\r\n" % len(WATCH)) + WATCH
PATHS = {"patched": {}, "internals_moved": {TEST_SWITCH: "1"}}
STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions(workers=1)


def statuses(data: bytes) -> list[int]:
    return [int(code) for code in STATUS_LINE.findall(data)]


AMBIGUOUS = {
    "cl_and_te": (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400),
    "obs_fold": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: one\r\n two\r\n\r\n", 400),
    "bare_lf_header": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\nX-A: one\r\n\r\n", 400),
    "bare_lf_request_line": (b"GET /healthz HTTP/1.1\nHost: 127.0.0.1\r\n\r\n", 400),
    "bare_lf_end": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\n\n", 400),
    "http_2_0_request_line": (b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
    "lowercase_method": (b"post / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n", 501),
}


@pytest.mark.parametrize("case", sorted(AMBIGUOUS))
@pytest.mark.parametrize("after_keep_alive", [False, True], ids=["first", "keep_alive"])
def test_security_claim_no_ambiguous_request_is_served(gateway, case, after_keep_alive):
    """[claim: ambiguous-head] The ambiguous head is refused and the connection closed: the request pipelined behind
    it is never answered (a front end framing the bytes otherwise cannot smuggle it in)."""
    request, status = AMBIGUOUS[case]
    data = until_close(gateway.port, (HEALTHZ if after_keep_alive else b"") + request + HEALTHZ)
    assert statuses(data) == ([200] if after_keep_alive else []) + [status], data


def test_two_authorization_headers_are_refused(gateway):
    """[claim: two-authorizations]"""
    data = until_close(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer a\r\n"
                                     b"Authorization: Bearer b\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [400] and b"more than one Authorization header" in data


def test_absolute_form_target_is_served_as_its_origin_form(gateway):
    """[claim: absolute-form]"""
    data = until_close(gateway.port, b"GET http://example.test/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                     b"Connection: close\r\n\r\n")
    assert statuses(data) == [200], data


def test_two_http10_requests_in_one_write_get_the_first_answered_then_the_close(gateway):
    """[claim: closing-request] HTTP/1.0, then HTTP/1.1 with `Connection: close`."""
    data = until_close(gateway.port, b"GET /healthz HTTP/1.0\r\n\r\n" * 2)
    assert statuses(data) == [200], data
    data = until_close(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" * 2)
    assert statuses(data) == [200], data


@pytest.fixture(scope="module", params=sorted(PATHS))
def on_either_path(request, tmp_path_factory):
    """A gateway offering HTTP/2, and one that does not (its rows moved)."""
    with running_gateway(workers=1, env=PATHS[request.param], tmp_path=tmp_path_factory.mktemp(request.param)) as gw:
        yield gw


def after_the_fronts_answer(port: int, request: bytes) -> bytes:
    """What the server writes for `request` on a connection kept after a stream request's
    refusal, up to the close."""
    answer, data = after_an_answer(port, REFUSED_STREAM, request)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"-32009" in answer, answer
    return data


@pytest.mark.parametrize("where", ["first", "after_the_fronts_answer"])
def test_security_claim_no_h2c_upgrade_by_default(on_either_path, where):
    """[claim: no-h2c-upgrade] `Upgrade: h2c` is ignored: the request is answered over
    HTTP/1.1, never 101."""
    if where == "first":
        data = until_close(on_either_path.port, H2C_UPGRADE, half_close=True)
    else:
        data = after_the_fronts_answer(on_either_path.port, H2C_UPGRADE)
    assert statuses(data) == [200] and b'"status":"serving"' in data, data


def test_an_upgrade_pipelined_behind_a_stream_request_is_no_reason_to_drop_it(on_either_path):
    """Both answered over HTTP/1.1, in order: never 101, never a connection dropped unanswered."""
    data = until_close(on_either_path.port, REFUSED_STREAM + H2C_UPGRADE, half_close=True)
    assert statuses(data) == [200, 200] and b"-32009" in data, data


def test_no_h2c_upgrade_on_a_keep_alive_connection(gateway):
    data = until_close(gateway.port, HEALTHZ + H2C_UPGRADE, half_close=True)
    assert statuses(data) == [200, 200], data


def test_h2c_upgrade_on_is_accepted_and_changes_nothing(tmp_path):
    """[claim: no-h2c-upgrade] --h2c-upgrade is still accepted, and has no effect: no
    HTTP/1.1 request is hypercorn's, so none switches to HTTP/2 (README); the log says so once."""
    with running_gateway("--h2c-upgrade", "on", workers=1, tmp_path=tmp_path) as gw:
        data = until_close(gw.port, H2C_UPGRADE, half_close=True)
        assert statuses(data) == [200], data
        warned = [r for r in gw.logs() if r.get("event", "").startswith("--h2c-upgrade has no effect")]
        assert len(warned) == 1 and warned[0].get("level") == "warning", warned


UNUSABLE_H2C_SETTINGS = {
    "not_base64": b"HTTP2-Settings: AAQ\r\n",
    "not_a_settings_body": b"HTTP2-Settings: AAMAAABkAAAA\r\n",
    "window_past_its_maximum": b"HTTP2-Settings: AASAAAAA\r\n",
    "two_of_them": b"HTTP2-Settings: AAMAAABk\r\nHTTP2-Settings: AAMAAABk\r\n",
    "none": b"",
}


def test_no_h2c_upgrade_whatever_its_settings(gateway):
    """[claim: h2-no-traceback] An `Upgrade: h2c` is always answered over HTTP/1.1, whatever its
    HTTP2-Settings (one h2 could apply, or not, or not exactly one: RFC 7540 §3.2.1): never 101,
    never an upgraded connection that failed with a traceback."""
    for case, settings in {"usable": b"HTTP2-Settings: AAMAAABk\r\n", **UNUSABLE_H2C_SETTINGS}.items():
        request = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                   b"Upgrade: h2c\r\n" + settings + b"\r\n")
        assert statuses(until_close(gateway.port, request, half_close=True)) == [200], case
    assert "Traceback" not in gateway.stderr()


def test_no_h2c_upgrade_where_http2_is_not_offered(tmp_path):
    """--h2c-upgrade on, but HTTP/2's guarantee does not hold (h2 left ALPN): no upgrade."""
    with running_gateway("--h2c-upgrade", "on", workers=1, env=PATHS["internals_moved"], tmp_path=tmp_path) as gw:
        data = until_close(gw.port, H2C_UPGRADE, half_close=True)
        assert statuses(data) == [200], data


@pytest.mark.parametrize("case", sorted(case for case in AMBIGUOUS if AMBIGUOUS[case][1] == 400))
def test_security_claim_no_ambiguous_request_after_the_fronts_answer(on_either_path, case):
    """The request after a stream request's refusal is read and refused as the first would be."""
    request, status = AMBIGUOUS[case]
    assert statuses(after_the_fronts_answer(on_either_path.port, request + HEALTHZ)) == [status]


@pytest.mark.parametrize("body", [
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","method":"murmur.StopSession","params":{}}',
    b'{"jsonrpc":"2.0","id":1,"method":"GetTask","\\u006dethod":"murmur.StopSession","params":{}}',
    b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ListTasks","params":{}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{},"params":{"pageSize":1}}',
    b'{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"ListTasks"}',
], ids=["method", "escaped_method", "id", "params", "jsonrpc"])
def test_security_claim_a_request_naming_a_member_twice_is_invalid(gateway, body):
    """[claim: member-twice] orjson keeps the last of two members, a log or filter may read the first: neither is
    served. The session is not stopped (readiness stays 200)."""
    status, _, answer = Http(gateway.port).request("POST", "/", headers_for(), body)
    answer = orjson.loads(answer)
    assert status == 200 and answer["error"]["code"] == -32600 and "more than once" in answer["error"]["message"]
    assert answer["id"] == (None if b'"id":2' in body else 1)
    assert Http(gateway.port).request("GET", "/readyz")[0] == 200


def test_a_nested_member_of_the_same_name_is_no_duplicate(gateway):
    status, _, answer = Http(gateway.port).request(
        "POST", "/", headers_for(), b'{"jsonrpc":"2.0","id":"x","method":"GetTask","params":{"id":"nope"}}')
    assert status == 200 and orjson.loads(answer)["error"]["code"] == -32001


def card_url(port: int, host: bytes | None) -> str:
    data = until_close(port, b"GET /.well-known/agent-card.json HTTP/1.0\r\n"
                             + (b"Host: " + host + b"\r\n" if host else b"") + b"\r\n")
    return orjson.loads(data.partition(b"\r\n\r\n")[2])["supportedInterfaces"][0]["url"]


def test_security_claim_the_card_never_names_a_clients_host(gateway):
    """[claim: card-url] Not the Host a client wrote (the card is cacheable), and never `:0` without one."""
    assert card_url(gateway.port, b"evil.example") == card_url(gateway.port, None) == \
        f"http://127.0.0.1:{gateway.port}/"


def test_the_card_names_the_public_url(tmp_path):
    """[claim: card-url]"""
    with running_gateway("--public-url", "https://agents.example:8443", workers=1, tmp_path=tmp_path) as gw:
        assert card_url(gw.port, b"evil.example") == "https://agents.example:8443/"


def test_security_claim_trailing_slash_redirects_are_off(gateway):
    """[claim: no-trailing-slash-redirect] SECURITY.md: no redirect that would echo the client's Host."""
    data = until_close(gateway.port, b"GET /healthz/ HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
    assert statuses(data) == [404] and b"location" not in data.lower() and b"evil.example" not in data


REFUSED = "murgw_requests_refused_total"
# what each refused head counts as (AMBIGUOUS's cases, then the rest)
COUNTED = {"cl_and_te": "ambiguous", "obs_fold": "ambiguous", "bare_lf_header": "ambiguous",
           "bare_lf_request_line": "ambiguous", "bare_lf_end": "ambiguous",
           "http_2_0_request_line": "version_not_supported", "lowercase_method": "not_implemented"}
MORE_REFUSED = {
    "two_authorizations": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer a\r\n"
                           b"Authorization: Bearer b\r\n\r\n", 400, "ambiguous"),
    "malformed_header_line": (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Name: x\r\n\r\n", 400, "bad_request"),
    "unknown_transfer_coding": (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
                                "not_implemented"),
}


def test_every_refused_head_is_counted_by_reason(tmp_path):
    """[claim: refusals-counted] The answers to heads no route sees count in
    murgw_requests_refused_total like the door's refusals, an ambiguous head as `ambiguous`,
    each once."""
    cases = [(request, status, COUNTED[name]) for name, (request, status) in AMBIGUOUS.items()]
    cases += MORE_REFUSED.values()
    with running_gateway(workers=1, metrics=True, tmp_path=tmp_path) as gw:
        before = series(scrape(gw.metrics_port), REFUSED)
        for request, status, _ in cases:
            assert statuses(until_close(gw.port, request + HEALTHZ)) == [status], request
        expected = dict(before)
        for _, _, reason in cases:
            expected[f'{REFUSED}{{reason="{reason}"}}'] += 1
        wait_for(lambda: series(scrape(gw.metrics_port), REFUSED) == expected, what="every refusal counted")
