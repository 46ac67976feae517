"""CORS (gateway/worker/door/cors.py), over real sockets: with `--allowed-origins` set, an
allowed origin's preflight is 204 with every header a browser checks, and every answer to it
(a 401's problem details, a stream's head) carries `Access-Control-Allow-Origin`, on
HTTP/1.1 and HTTP/2; another origin is 403 before its token is read, its preflight with no
`Access-Control-*` header; the gateway's own origin passes untouched; a reload changes the
set. With the option empty, a request carrying `Origin` is answered byte for byte as one
without it."""

from __future__ import annotations

import os
import re
import signal
import socket

import pytest

from helpers.gateway_harness import running_gateway, scrape, token_table, wait_for
from helpers.http_client import problem_detail, rpc_body
from helpers.tls_support import H2Connection, H2Stream

APP = "https://app.example"
OTHER = "https://evil.example"
TOKEN = "cors-tok-1"
WATCH = "murmur.WatchSession"
LIVE = str(2**40)
PROTOCOL_HEADERS = "Authorization, Content-Type, A2A-Version, A2A-Extensions, Last-Event-ID"


def config_file(tmp_path, origins: str) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text(f"allowed-origins = {origins}\n" + token_table([("page", TOKEN, ["*"])]))
    return str(path)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("cors")
    with running_gateway("--config", config_file(tmp_path, f'["{APP}", "http://127.0.0.2:8000"]'),
                         workers=1, metrics=True, tmp_path=tmp_path) as gateway:
        yield gateway


def exchange(port: int, request: bytes, *, head_only: bool = False) -> tuple[bytes, bytes]:
    """(the answer's head, its body) for one request on its own connection; `head_only`: a
    stream's head, read as soon as it is whole."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or (not head_only and not _whole(data)):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def _whole(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    return length is not None and len(body) >= int(length.group(1)) or head.startswith(b"HTTP/1.1 204")


def headers_of(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.lower()] = value.strip()
    return int(status_line.split()[1]), fields


def post(method: str, params: dict, *, origin: str | None, token: str | None = TOKEN,
         extra: bytes = b"", host: bytes = b"127.0.0.1") -> bytes:
    body = rpc_body(method, params)
    lines = b"POST / HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n" % host
    if origin is not None:
        lines += b"Origin: %b\r\n" % origin.encode()
    if token is not None:
        lines += b"Authorization: Bearer %b\r\n" % token.encode()
    return lines + extra + b"Content-Length: %d\r\nConnection: close\r\n\r\n%b" % (len(body), body)


def preflight(origin: str, path: str = "/", method: str = "POST") -> bytes:
    return (f"OPTIONS {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {origin}\r\n"
            f"Access-Control-Request-Method: {method}\r\n"
            "Access-Control-Request-Headers: authorization,content-type,a2a-version,last-event-id\r\n"
            "Connection: close\r\n\r\n").encode()


def cors_fields(fields: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in fields.items() if name.startswith("access-control-") or name == "vary"}


def test_an_allowed_origins_preflight_is_204_with_every_header(gw):
    """[claim: cors-allowed]"""
    head, body = exchange(gw.port, preflight(APP))
    status, fields = headers_of(head)
    assert (status, body) == (204, b"")
    assert cors_fields(fields) == {
        "access-control-allow-origin": APP, "vary": "Origin", "access-control-expose-headers": "A2A-Extensions",
        "access-control-allow-methods": "POST", "access-control-allow-headers": PROTOCOL_HEADERS,
        "access-control-max-age": "600"}
    assert "content-length" not in fields  # a 204 has no body to measure


def test_a_preflight_names_the_methods_of_its_path(gw):
    status, fields = headers_of(exchange(gw.port, preflight(APP, "/.well-known/agent-card.json", "GET"))[0])
    assert (status, fields["access-control-allow-methods"]) == (204, "GET, HEAD")
    head, body = exchange(gw.port, preflight(APP, "/nowhere", "GET"))
    status, fields = headers_of(head)
    assert status == 404 and fields["access-control-allow-origin"] == APP
    assert problem_detail(404, fields, body) == "nothing is served at this path"


def test_a_401_to_an_allowed_origin_is_readable(gw):
    head, body = exchange(gw.port, post("GetTask", {"id": "t"}, origin=APP, token="not-a-token"))
    status, fields = headers_of(head)
    assert status == 401
    assert cors_fields(fields) == {"access-control-allow-origin": APP, "vary": "Origin",
                                   "access-control-expose-headers": "A2A-Extensions"}
    assert problem_detail(401, fields, body)


def test_a_stream_head_to_an_allowed_origin_carries_cors_over_http1(gw):
    head, _ = exchange(gw.port, post(WATCH, {}, origin=APP, extra=b"Last-Event-ID: %b\r\n" % LIVE.encode()),
                       head_only=True)
    status, fields = headers_of(head)
    assert (status, fields["content-type"]) == (200, "text/event-stream")
    assert cors_fields(fields) == {"access-control-allow-origin": APP, "vary": "Origin",
                                   "access-control-expose-headers": "A2A-Extensions"}


def test_another_origin_is_refused_403_before_its_token_is_read(gw):
    """[claim: cors-refused]"""
    refused = scrape(gw.metrics_port).get('murgw_requests_refused_total{reason="forbidden"}', 0)
    for token in (None, TOKEN, "not-a-token"):  # no token, a good one, a bad one: 403 each, never 401
        head, body = exchange(gw.port, post("GetTask", {"id": "t"}, origin=OTHER, token=token))
        status, fields = headers_of(head)
        assert status == 403 and cors_fields(fields) == {}
        assert problem_detail(403, fields, body) == (
            "this page's origin is not one the gateway allows (--allowed-origins)")
    assert scrape(gw.metrics_port)['murgw_requests_refused_total{reason="forbidden"}'] == refused + 3
    line = [r for r in gw.logs() if r.get("status") == 403 and r.get("path") == "/"][-1]
    assert line["refusal"] == "origin not allowed"


def test_a_forged_request_carries_no_token(gw):
    """[claim: no-csrf] What a browser attaches by itself, cookies, gets a page nothing: with
    no `Authorization` the answer is 401, a form's body is 404, and no answer or preflight ever
    allows credentials."""
    cookie = b"Cookie: session=user-42\r\n"
    head, body = exchange(gw.port, post("GetTask", {"id": "t"}, origin=APP, token=None, extra=cookie))
    status, fields = headers_of(head)
    assert (status, fields["www-authenticate"]) == (401, "Bearer") and problem_detail(401, fields, body)
    form = post("GetTask", {"id": "t"}, origin=APP, token=None, extra=cookie).replace(
        b"Content-Type: application/json", b"Content-Type: application/x-www-form-urlencoded")
    assert headers_of(exchange(gw.port, form)[0])[0] == 404
    for request in (preflight(APP), post("GetTask", {"id": "t"}, origin=APP, extra=cookie)):
        fields = headers_of(exchange(gw.port, request)[0])[1]
        assert "access-control-allow-credentials" not in fields and fields["access-control-allow-origin"] == APP


@pytest.mark.parametrize("origin", [OTHER, "null", "https://app.example.evil.example", "http://app.example"])
def test_another_origins_preflight_gets_no_cors_header(gw, origin):
    status, fields = headers_of(exchange(gw.port, preflight(origin))[0])
    assert status == 403 and cors_fields(fields) == {}


def test_the_gateways_own_origin_passes_with_no_cors_header(gw):
    """A page the gateway serves (the /watch page), or a proxy in front of it serves on one
    origin, sends `Origin` naming the host it reached: served as before."""
    own = b"127.0.0.1:%d" % gw.port
    head, _ = exchange(gw.port, post("GetTask", {"id": "t"}, origin=f"http://{own.decode()}", host=own))
    status, fields = headers_of(head)
    assert status == 200 and cors_fields(fields) == {}


def h2_preflight(h2: H2Connection, origin: str) -> H2Stream:
    stream_id = h2.conn.get_next_available_stream_id()
    h2.conn.send_headers(stream_id, [(b":method", b"OPTIONS"), (b":path", b"/"), (b":scheme", b"https"),
                                     (b":authority", b"127.0.0.1"), (b"origin", origin.encode()),
                                     (b"access-control-request-method", b"POST")], end_stream=True)
    h2.sock.sendall(h2.conn.data_to_send())
    stream = h2.streams[stream_id] = H2Stream(stream_id)
    return stream


def test_over_http2_the_same_headers(gw, certs, tmp_path):
    with running_gateway("--config", config_file(tmp_path, f'["{APP}"]'), *certs.args, workers=1,
                         tls=certs.client_context(), tmp_path=tmp_path) as h2gw:
        h2 = H2Connection(h2gw.port, certs.client_context())
        try:
            stream = h2.post(WATCH, {}, last_event_id=LIVE, token=TOKEN, extra=[("Origin", APP)])
            h2.pump_until(lambda: stream.events, "connection-ack")
            refused = h2.post("GetTask", {"id": "t"}, token="not-a-token", extra=[("Origin", APP)])
            other = h2.post("GetTask", {"id": "t"}, token=TOKEN, extra=[("Origin", OTHER)])
            allowed, disallowed = h2_preflight(h2, APP), h2_preflight(h2, OTHER)
            h2.pump_until(lambda: refused.ended and other.ended and allowed.ended and disallowed.ended,
                          "the refusals and the preflights")
        finally:
            h2.close()
    expected = {b"access-control-allow-origin": APP.encode(), b"vary": b"Origin",
                b"access-control-expose-headers": b"A2A-Extensions"}
    assert stream.status == 200 and stream.headers[b"content-type"] == b"text/event-stream"
    assert {k: v for k, v in stream.headers.items() if k in expected} == expected
    assert refused.status == 401 and {k: v for k, v in refused.headers.items() if k in expected} == expected
    assert other.status == 403 and not any(k.startswith(b"access-control-") for k in other.headers)
    assert allowed.status == 204 and allowed.headers[b"access-control-allow-origin"] == APP.encode()
    assert allowed.headers[b"access-control-allow-methods"] == b"POST"
    assert allowed.headers[b"access-control-allow-headers"] == PROTOCOL_HEADERS.encode()
    assert disallowed.status == 403 and not any(k.startswith(b"access-control-") for k in disallowed.headers)


def test_a_reload_changes_the_allowed_origins(tmp_path):
    config = config_file(tmp_path, f'["{APP}"]')
    with running_gateway("--config", config, workers=1, metrics=True, tmp_path=tmp_path) as gateway:
        assert headers_of(exchange(gateway.port, preflight(OTHER))[0])[0] == 403
        with open(config, "w") as fh:
            fh.write(f'allowed-origins = ["{OTHER}"]\n' + token_table([("page", TOKEN, ["*"])]))
        os.kill(gateway.pid, signal.SIGHUP)
        wait_for(lambda: any(r.get("event") == "reloaded settings applied" for r in gateway.logs()),
                 what="the reload applied")
        status, fields = headers_of(exchange(gateway.port, preflight(OTHER))[0])
        assert (status, fields["access-control-allow-origin"]) == (204, OTHER)
        assert headers_of(exchange(gateway.port, preflight(APP))[0])[0] == 403


def test_with_no_origin_allowed_nothing_changes(tmp_path):
    """[claim: cors-off] The option empty (the default): `Origin` is not read; the answers, a refusal's, a
    JSON-RPC error's and a stream's head, are the bytes of the same request without it."""
    config = tmp_path / "gateway.toml"
    config.write_text(token_table([("page", TOKEN, ["*"])]))
    with running_gateway("--config", str(config), workers=1, tmp_path=tmp_path) as gateway:
        for request in (lambda origin: post("GetTask", {"id": "t"}, origin=origin, token="not-a-token"),
                        lambda origin: post("NoSuchMethod", {}, origin=origin),
                        lambda origin: preflight(origin) if origin else preflight(APP).replace(
                            b"Origin: https://app.example\r\n", b"")):
            assert exchange(gateway.port, request(OTHER)) == exchange(gateway.port, request(None))
        heads = [exchange(gateway.port, post(WATCH, {}, origin=origin, extra=b"Last-Event-ID: %b\r\n" % LIVE.encode()),
                          head_only=True)[0] for origin in (OTHER, None)]
        assert heads[0] == heads[1]
        status, fields = headers_of(exchange(gateway.port, preflight(APP))[0])
        assert status == 405 and cors_fields(fields) == {}
