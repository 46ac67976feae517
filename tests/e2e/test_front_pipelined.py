"""One request's bytes never reach another request's parser state (issue: a pipelined
request's headers joined a stream request's).

A `murmur.WatchSession` POST with no token, followed in the same write by a `GET /healthz`
that carries a valid token: the POST is refused 401, as it is alone, on plain HTTP and on
TLS. Before the fix the second head's `Authorization` was read as the stream request's and
the stream was opened (200 text/event-stream) for the second request's caller.
"""

from __future__ import annotations

import socket

import orjson
import pytest

from helpers.gateway_harness import running_gateway, token_table
from helpers.raw_http import RAW_READ_TIMEOUT

TOKEN = "ops-0d1e2f"
WATCH = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "murmur.WatchSession", "params": {}})
NO_TOKEN_WATCH = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(WATCH), WATCH))
HEALTHZ_WITH_TOKEN = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n" % TOKEN.encode()


@pytest.fixture(scope="module")
def door(tmp_path_factory):
    config = tmp_path_factory.mktemp("door") / "door.toml"
    config.write_text(token_table([("ops", TOKEN, ["murmur.WatchSession"])]))
    return str(config)


@pytest.fixture(scope="module")
def plain_gateway(door, tmp_path_factory):
    with running_gateway("--config", door, workers=1, tmp_path=tmp_path_factory.mktemp("plain")) as gw:
        yield gw


@pytest.fixture(scope="module")
def tls_gateway(door, certs, tmp_path_factory):
    with running_gateway("--config", door, *certs.args, workers=1, tmp_path=tmp_path_factory.mktemp("tls"),
                         tls=certs.client_context()) as gw:
        yield gw


def first_answer_head(sock) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data.partition(b"\r\n\r\n")[0]


def test_a_pipelined_token_does_not_open_a_tokenless_stream(plain_gateway):
    with socket.create_connection(("127.0.0.1", plain_gateway.port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(NO_TOKEN_WATCH + HEALTHZ_WITH_TOKEN)
        head = first_answer_head(sock)
    assert head.startswith(b"HTTP/1.1 401 Unauthorized\r\n") and b"event-stream" not in head, head


def test_a_pipelined_token_does_not_open_a_tokenless_stream_over_tls(tls_gateway, certs):
    context = certs.client_context(["http/1.1"])
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=RAW_READ_TIMEOUT) as raw_sock:
        with context.wrap_socket(raw_sock, server_hostname="127.0.0.1") as sock:
            sock.sendall(NO_TOKEN_WATCH + HEALTHZ_WITH_TOKEN)
            head = first_answer_head(sock)
    assert head.startswith(b"HTTP/1.1 401 Unauthorized\r\n") and b"event-stream" not in head, head


def test_the_token_alone_opens_the_stream(plain_gateway):
    """The same stream request with the token is served: the 401 above is the missing token's."""
    with socket.create_connection(("127.0.0.1", plain_gateway.port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(NO_TOKEN_WATCH.replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer %s\r\n\r\n" % TOKEN.encode(), 1))
        head = first_answer_head(sock)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"text/event-stream" in head, head
