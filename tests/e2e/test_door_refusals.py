"""The door's own HTTP refusals are RFC 9457 problem details, byte-wise (gateway/worker/problem.py).

401 and 403 are in test_door_auth.py, 408, 413, 431 and 503 in test_limits.py, each through
`http_client.problem_detail`; here are the rest, and one refusal's exact bytes. An A2A client
reads a body's `error` member as a JSON-RPC error object, so no refusal carries one.
"""

from __future__ import annotations

import socket

import pytest

from helpers.gateway_harness import GatewayOptions
from helpers.http_client import Http, headers_for, problem_detail


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions(workers=1)


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_a_refusal_is_exactly_these_bytes(gateway):
    """[claim: problem-details]"""
    body = (b'{"type":"about:blank","title":"Not Found","status":404,'
            b'"detail":"not found: POST / takes a JSON body with content-type application/json"}')
    assert raw(gateway.port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: 2\r\nConnection: close\r\n\r\n{}") == (
        b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\ncontent-type: application/problem+json\r\n"
        b"Connection: close\r\n\r\n%b" % (len(body), body))  # h11 echoes the client's close


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_post_without_a_json_content_type_is_404(gateway, content_type):
    status, headers, body = Http(gateway.port).request(
        "POST", "/", headers_for(content_type=content_type), b'{"jsonrpc":"2.0"}')
    assert status == 404
    assert problem_detail(404, headers, body) == \
        "not found: POST / takes a JSON body with content-type application/json"


@pytest.mark.parametrize("body", [b"", b"  \r\n\t"])
def test_post_with_an_empty_body_is_404(gateway, body):
    status, headers, answer = Http(gateway.port).request("POST", "/", headers_for(), body)
    assert status == 404 and problem_detail(404, headers, answer) == "not found: POST / takes a non-empty JSON body"


@pytest.mark.parametrize("method, path, allow", [("GET", "/", "POST"), ("PUT", "/", "POST"),
                                                 ("POST", "/healthz", "GET, HEAD"), ("DELETE", "/readyz", "GET, HEAD")])
def test_a_method_the_path_does_not_take_is_405_naming_what_it_takes(gateway, method, path, allow):
    """[claim: unknown-path-method]"""
    body = b"" if method == "GET" else b"{}"
    answer = raw(gateway.port, b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b"
                 % (method.encode(), path.encode(), len(body), body))
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    assert lines[0] == "HTTP/1.1 405 Method Not Allowed"
    assert set(headers["allow"].split(", ")) == set(allow.split(", "))  # in no fixed order
    assert problem_detail(405, headers, body) == f"this path takes only {headers['allow']}"


def test_an_unknown_path_is_404(gateway):
    """[claim: unknown-path-method]"""
    status, headers, body = Http(gateway.port).request("GET", "/no/such/thing")
    assert status == 404 and problem_detail(404, headers, body) == "nothing is served at this path"


def test_bytes_that_are_not_http_get_problem_details_and_a_close(gateway):
    """[claim: malformed-http]"""
    answer = raw(gateway.port, b"NOT HTTP AT ALL\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 400 Bad Request" and b"connection: close" in lines
    headers = {k.lower(): v for k, v in (line.decode().split(": ", 1) for line in lines[1:])}
    assert problem_detail(400, headers, body) == "the request is not well-formed HTTP/1.1"


def test_a_websocket_handshake_is_refused_with_problem_details(gateway):
    """[claim: websocket-refused]"""
    answer = raw(gateway.port, b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    assert lines[0] == "HTTP/1.1 403 Forbidden"
    assert problem_detail(403, headers, body) == "this door serves no WebSocket: send JSON-RPC as POST /"
