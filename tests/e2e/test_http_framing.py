"""HTTP/1.1 framing, byte-wise over raw sockets against the real gateway (http/framing.py, http/front.py).

- the status line carries its reason phrase (`HTTP/1.1 200 OK`, `HTTP/1.1 404 Not Found`);
- a stream's end is the connection's end: the terminating chunk, then the server's close
  (the direct body path, HTTP/1.1), or the close that ends the body (the ASGI sends path,
  HTTP/1.0);
- a client that sends its request and shuts its write side gets the whole answer, then the
  server's close; an idle connection it half-closes is closed at once, not left in CLOSE-WAIT;
  on a stream, that FIN is the watcher leaving: the stream ends.

The header timeout is set far above the sockets' own timeout, so a server that only closes
when that timer fires fails here rather than passing late.
"""

from __future__ import annotations

import socket

import orjson
import pytest

from gateway.protocol.parser import SSEParser
from helpers.gateway_harness import GatewayOptions, running_gateway
from helpers.http_client import rpc, user_message
from helpers.raw_http import dechunk, post, until_close
from helpers.sse_reading import describe, is_terminal_event

READ_TIMEOUT = 20.0
HEADER_TIMEOUT = "120"
SSM = "SendStreamingMessage"


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--header-timeout", HEADER_TIMEOUT)


def events_of(stream_body: bytes) -> list:
    return [e for e in SSEParser().feed(stream_body) if e.data is not None]


def stream_answer(raw: bytes, version: str) -> list:
    """The events of a whole stream answer: its head checked, its body read to the close."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK"
    names = [line.split(b":", 1)[0].lower() for line in lines[1:]]
    if version == "1.1":
        assert names == [b"content-type", b"cache-control", b"connection", b"transfer-encoding"]
        assert b"connection: keep-alive" in lines and b"Transfer-Encoding: chunked" in lines
        body = dechunk(body)
    else:  # close-delimited: the close is the end
        assert b"transfer-encoding" not in names
    events = events_of(body)
    assert events and is_terminal_event(events[-1]), [describe(e) for e in events]
    return events


def test_status_lines_carry_their_reason_phrase(gateway):
    assert until_close(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                       ).startswith(b"HTTP/1.1 200 OK\r\n")
    assert until_close(gateway.port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                     b"Connection: close\r\n\r\n{}").startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert until_close(gateway.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                       ).startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")
    assert until_close(gateway.port, post("SendMessage", user_message("hi"), headers=b"Connection: close\r\n")
                       ).startswith(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_a_task_stream_ends_with_its_connection(gateway, version):
    """HTTP/1.1 is the direct body path (chunks past hypercorn), HTTP/1.0 the ASGI sends path."""
    events = stream_answer(until_close(gateway.port, post(SSM, user_message("hello"), version)), version)
    assert [describe(e) for e in events][-2:] == ["artifactUpdate", "completed:task completed"]


def test_a_subscription_ends_with_its_connection(gateway):
    _, _, body = rpc(gateway.port, "SendMessage", user_message("/scenario slow turns=2 delay=0.2"))
    task_id = body["result"]["task"]["id"]
    events = stream_answer(until_close(gateway.port, post("SubscribeToTask", {"id": task_id})), "1.1")
    assert describe(events[-1]) == "completed:task completed"


def test_a_rejected_task_stream_ends_with_its_connection(tmp_path):
    with running_gateway("--config", _config(tmp_path, "[lifecycle]\nmax_queued_tasks = 1\n"),
                         "--header-timeout", HEADER_TIMEOUT, tmp_path=tmp_path, workers=1) as gw:
        rpc(gw.port, "SendMessage", user_message("/scenario quiet seconds=60"))
        raw = until_close(gw.port, post(SSM, user_message("no room")))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    (only,) = events_of(dechunk(body))
    assert only.id is None and b'"TASK_STATE_REJECTED"' in only.data.encode()


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_a_half_closed_stream_client_has_left_and_its_stream_ends(gateway, version):
    """SECURITY.md: on a stream, a client's FIN is the watcher leaving. A watch never ends by
    itself and heartbeats reach a half-closed client, so only the FIN closes this one (the
    header timeout is far beyond the socket's own)."""
    raw = until_close(gateway.port, post("murmur.WatchSession", {}, version), half_close=True)
    head = raw.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 OK" and b"content-type: text/event-stream" in head


def test_a_half_closed_client_gets_the_whole_json_answer_then_the_close(gateway):
    raw = until_close(gateway.port, post("SendMessage", user_message("hi")), half_close=True)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"content-length:")).split(b":")[1])
    assert len(body) == length and orjson.loads(body)["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    raw = until_close(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", half_close=True)
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and orjson.loads(raw.partition(b"\r\n\r\n")[2])["status"] == "serving"


def test_an_idle_connection_the_client_half_closes_is_closed_at_once(gateway):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=READ_TIMEOUT) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
        length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
        body = head.partition(b"\r\n\r\n")[2]
        while len(body) < length:
            body += sock.recv(65536)
        sock.shutdown(socket.SHUT_WR)  # the answer is in: the connection is idle, kept alive
        # the server's close, long before its header timeout: it left CLOSE-WAIT
        assert sock.recv(65536) == b""
