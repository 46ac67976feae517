"""The front (gateway/worker/http/front.py) over real sockets: the ambiguous requests it
refuses (400, closed), a stream asked for on a keep-alive connection after another answer,
and TLS: a stream over ALPN http/1.1 (or none) is the front's, HTTP/2 stays hypercorn's.
"""

from __future__ import annotations

import socket

import orjson
import pytest

from helpers.gateway_harness import GatewayOptions
from helpers.raw_http import RAW_READ_TIMEOUT, read_answer, read_until, until_close

WATCH = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "murmur.WatchSession", "params": {}})
GET_TASK = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "tsk_none"}})
HEAD = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
CHUNKED_WATCH = HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(WATCH), WATCH)


def request(body: bytes = WATCH, extra: bytes = b"") -> bytes:
    return HEAD + b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


SMUGGLED = {
    "Content-Length and Transfer-Encoding": HEAD
    + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
    % (len(WATCH), len(WATCH), WATCH),
    "two different Content-Lengths": request(extra=b"Content-Length: 5\r\n"),
    "an obs-fold line": request(extra=b"X-A: one\r\n two\r\n"),
    "a bare LF": request(extra=b"X-A: one\nX-B: two\r\n"),
    "a NUL byte": request(extra=b"X-A: o\x00ne\r\n"),
    "two Authorization headers": request(extra=b"Authorization: Bearer a\r\nAuthorization: Bearer b\r\n"),
    "a chunk-size line that is not hexadecimal": HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
}


# Numbers from the wire too long to convert: h11 refuses both (`bad Content-Length`, `illegal
# chunk header`), and so does the front, before it converts them (head_checks.py, body.py).
TOO_LONG = {
    "a Content-Length of 4,301 digits": HEAD + b"Content-Length: " + b"0" * 4300 + b"2\r\n\r\n{}",
    "a chunk size of 21 hexadecimal digits": HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    + b"0" * 20 + b"2\r\n{}\r\n0\r\n\r\n",
}


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--header-timeout", "60", workers=1)


@pytest.mark.parametrize("case", SMUGGLED, ids=list(SMUGGLED))
def test_an_ambiguous_request_is_refused_400_and_closed(gateway, case):
    raw = until_close(gateway.port, SMUGGLED[case])  # returns once the server closed
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"\r\nconnection: close" in head, raw
    assert b'"status":400' in body and b"text/event-stream" not in raw


@pytest.mark.parametrize("case", TOO_LONG, ids=list(TOO_LONG))
def test_a_number_too_long_to_convert_is_refused_400_and_closed(gateway, case):
    """No input raises: the front answers 400 with problem details and closes, as it answers
    other bad framing, and the worker logs no error or traceback for it."""
    raw = until_close(gateway.port, TOO_LONG[case])
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"\r\nconnection: close" in head, raw[:300]
    assert b'"status":400' in body
    assert "Traceback" not in gateway.stderr()
    assert not [line for line in gateway.logs() if line.get("level") in ("error", "critical")]


def test_a_stream_after_a_get_task_on_one_keep_alive_connection(gateway):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(request(GET_TASK))
        answer, rest = read_answer(sock)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b'"id":2' in answer and not rest
        sock.sendall(request())
        data = read_until(sock, b"connection-ack")
    assert data.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")


def test_a_refused_stream_keeps_the_connection_for_the_next_request(gateway):
    """A stream request answered with a JSON-RPC error (here -32009, A2A-Version) leaves the
    connection open: the next request on it is answered."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=RAW_READ_TIMEOUT) as sock:
        sock.sendall(request().replace(b"A2A-Version: 1.0", b"A2A-Version: 9.0"))
        answer, rest = read_answer(sock)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"-32009" in answer and not rest
        sock.sendall(request(GET_TASK))
        answer, _ = read_answer(sock)
        assert b'"id":2' in answer


@pytest.fixture(scope="module")
def tls_gateway(certs, tmp_path_factory):
    from helpers.gateway_harness import running_gateway
    with running_gateway(*certs.args, workers=1, tmp_path=tmp_path_factory.mktemp("tls"),
                         tls=certs.client_context()) as gw:
        yield gw


@pytest.mark.parametrize("alpn", [["http/1.1"], None], ids=["http/1.1", "no ALPN"])
def test_a_tls_stream_takes_the_front(tls_gateway, certs, alpn):
    """A chunked stream request (read by the front's own chunked reader), the stream's head
    and its first event, then the client's close ends it."""
    context = certs.client_context(alpn)
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=RAW_READ_TIMEOUT) as raw_sock:
        with context.wrap_socket(raw_sock, server_hostname="127.0.0.1") as sock:
            sock.sendall(CHUNKED_WATCH)
            data = read_until(sock, b"connection-ack")
            chosen = sock.selected_alpn_protocol()
    assert chosen == (alpn[0] if alpn else None)
    assert data.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"), data


def test_tls_h2_stays_with_hypercorn(tls_gateway, certs):
    """A client offering h2 gets it (hypercorn's HTTP/2), and its requests are hypercorn's."""
    import httpx
    with httpx.Client(http2=True, verify=certs.client_context()) as client:
        answer = client.get(f"https://127.0.0.1:{tls_gateway.port}/healthz")
    assert answer.http_version == "HTTP/2" and answer.status_code == 200
