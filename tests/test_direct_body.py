"""The direct sink (gateway/worker/hypercorn/direct.py): chunks written past hypercorn must stay valid
HTTP/1.1, leave the connection reusable, and only be used where hypercorn's HTTP/1.1 path
is found. A hypercorn release that moves the attributes `find` follows fails here."""

from __future__ import annotations

import asyncio
import socket
import threading

import h11
import orjson
import pytest
import uvloop
from hypercorn.asyncio import serve
from hypercorn.config import Config

from gateway.protocol.parser import SSEParser
from gateway.worker.hypercorn import direct
from gateway_harness import running_gateway

CHUNKS = [b"first\n", b"x" * 70_000, b"", b"last\n"]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    body = direct.find(send, receive)
    if scope["path"] == "/direct" and body is not None:
        await send({"type": "http.response.body", "body": b"direct\n", "more_body": True})
        for chunk in CHUNKS:
            if chunk:
                body.write(chunk)
            if body.blocked:
                await body.drain()
    else:
        await send({"type": "http.response.body", "body": b"asgi\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture
def server():
    listener = socket.create_server(("127.0.0.1", 0))
    config = Config()
    port = listener.getsockname()[1]
    config.bind = [f"fd://{listener.detach()}"]  # hypercorn owns (and closes) the socket
    config.accesslog = config.errorlog = None
    loop = uvloop.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(serve(app, config, shutdown_trigger=stop.wait),), daemon=True)
    thread.start()
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def exchange(sock: socket.socket, conn: h11.Connection, target: str) -> tuple[int, bytes, list[bytes]]:
    """One request on a kept-alive connection: status, the whole body, and its raw chunks."""
    sock.sendall(conn.send(h11.Request(method="GET", target=target, headers=[("host", "test")])))
    sock.sendall(conn.send(h11.EndOfMessage()))
    status, body, chunks = 0, b"", []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
            assert (b"transfer-encoding", b"chunked") in list(event.headers)
        elif isinstance(event, h11.Data):
            body += event.data
            chunks.append(event.data)
        elif isinstance(event, h11.EndOfMessage):
            conn.start_next_cycle()
            return status, body, chunks


def test_direct_chunks_are_valid_http_and_the_connection_stays_usable(server):
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        conn = h11.Connection(h11.CLIENT)
        status, body, _ = exchange(sock, conn, "/direct")
        assert status == 200
        assert body == b"direct\n" + b"".join(CHUNKS)
        # keep-alive bookkeeping survived: the same connection answers a second request
        assert exchange(sock, conn, "/other")[:2] == (200, b"asgi\n")


def test_http_1_0_gets_no_direct_body(server):
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        sock.sendall(b"GET /direct HTTP/1.0\r\nhost: test\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200")
    assert body == b"asgi\n"  # close-delimited, not chunked: `find` declined


def test_find_declines_what_is_not_hypercorn():
    async def plain_send(message):
        pass
    assert direct.find(plain_send, None) is None
    assert direct.find(None, None) is None


def test_an_http_1_0_watcher_is_served_through_asgi_sends(tmp_path):
    """The gateway's fallback path: a close-delimited stream with the same events."""
    with running_gateway("--sim-load", "50", workers=1, tmp_path=tmp_path) as gw:
        request = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "murmur.WatchSession", "params": {}})
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"POST / HTTP/1.0\r\nhost: test\r\ncontent-type: application/json\r\na2a-version: 1.0\r\n"
                         b"content-length: %d\r\n\r\n%b" % (len(request), request))
            buffered = b""
            while b"\r\n\r\n" not in buffered:
                chunk = sock.recv(65536)
                assert chunk, "no response head"
                buffered += chunk
            head, _, data = buffered.partition(b"\r\n\r\n")
            assert b" 200" in head.split(b"\r\n")[0]
            assert b"chunked" not in head.lower()
            parser, ids = SSEParser(), []
            while True:
                ids += [int(e.id) for e in parser.feed(data) if e.id is not None]
                if len(ids) >= 20:
                    break
                data = sock.recv(65536)
                assert data, f"the stream ended early: {buffered!r}"
    assert ids == list(range(ids[0], ids[0] + len(ids)))
