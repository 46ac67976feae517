"""The front of HTTP/1.1 connections (gateway/worker/http/front.py) against h11, beyond the
head: Hypothesis writes pipelined sequences of requests (bodies by Content-Length and
chunked, chunk extensions and trailers, `Expect: 100-continue`, `Connection: close`,
HTTP/1.0, now and then a chunk-size line that is not one), sends them to a real gateway over
a real socket split at random points, reading what has come back between some of the pieces
and leaving it unread between others, and ends with the client's EOF, sometimes in the middle
of a request. h11, as a server, reads the same bytes: the front answers exactly the requests
h11 parses, in order (each JSON-RPC answer names its request's id), a 400 where h11 finds the
framing broken or a head the EOF cut short, nothing for a body it cut short, and then closes the connection:
nothing is left open.

A sequence ends with its first request after which h11 reads nothing more (`Connection:
close`, HTTP/1.0, broken framing): bytes after it would make the server's close a reset that
could take its answers with it.
"""

from __future__ import annotations

import contextlib
import select
import socket

import h11
import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.gateway_harness import GatewayOptions

READ_TIMEOUT = 20.0  # the server's close after the client's EOF: far sooner


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--header-timeout", "60", workers=1)


@st.composite
def a_request(draw, rpc_id: int) -> tuple[bytes, bool]:
    """One request's bytes, and whether h11 reads nothing after it."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "GetTask", "params": {"id": "tsk_none"}})
    version = draw(st.sampled_from(["1.1"] * 4 + ["1.0"]))
    chunked = version == "1.1" and draw(st.booleans())
    closes = draw(st.integers(0, 4)) == 0
    broken = chunked and draw(st.integers(0, 8)) == 0
    lines = [f"POST / HTTP/{version}", "Host: 127.0.0.1", "Content-Type: application/json", "A2A-Version: 1.0"]
    if draw(st.booleans()):
        lines.append("Expect: 100-continue")
    if closes:
        lines.append("Connection: close")
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    if broken:
        return head + b"zz\r\n", True
    if not chunked:
        return head + body, closes or version == "1.0"
    cuts = sorted(draw(st.sets(st.integers(1, len(body) - 1), max_size=4)))
    out = bytearray(head)
    for start, end in zip([0, *cuts], [*cuts, len(body)]):
        extension = b";x=1" if draw(st.integers(0, 3)) == 0 else b""
        out += b"%x%s\r\n%s\r\n" % (end - start, extension, body[start:end])
    out += b"0\r\n" + (b"X-Trailer: 1\r\n" if draw(st.booleans()) else b"") + b"\r\n"
    return bytes(out), closes


@st.composite
def conversations(draw) -> tuple[bytes, list[int], list[bool]]:
    """(the bytes sent before the EOF, where they are split, whether the client reads what has
    come back after each piece)."""
    data = b""
    for rpc_id in range(1, draw(st.integers(1, 6)) + 1):
        request, last = draw(a_request(rpc_id))
        data += request
        if last:
            break
    if draw(st.integers(0, 3)) == 0:  # the EOF in the middle of the sequence
        data = data[:draw(st.integers(0, len(data) - 1))]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=8)))
    reads = draw(st.lists(st.booleans(), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    return data, cuts, reads


def h11_reads(data: bytes) -> tuple[list[int], bool]:
    """What h11, a server, reads of `data` then the EOF: the JSON-RPC ids of the requests it
    parses whole, in order, and whether it then refuses what follows (a 400 owed: framing
    broken, or a head the EOF cut short, h11's error hint; a body cut short is owed nothing,
    its request already the app's)."""
    server = h11.Connection(h11.SERVER)
    ids: list[int] = []
    body = b""
    server.receive_data(data)
    eof = head_cut = False
    while True:
        try:
            event = server.next_event()
        except h11.RemoteProtocolError:
            return ids, not eof or head_cut
        if isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            ids.append(orjson.loads(body)["id"])
            body = b""
            server.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
            server.send(h11.EndOfMessage())
            if server.their_state is not h11.DONE or server.our_state is not h11.DONE:
                return ids, False  # it reads nothing more (close, HTTP/1.0)
            server.start_next_cycle()
        elif event is h11.NEED_DATA:
            if eof:
                return ids, False
            head_cut = server.their_state is h11.IDLE and bool(server.trailing_data[0])
            server.receive_data(b"")
            eof = True
        elif isinstance(event, h11.ConnectionClosed):
            return ids, False


def answers(data: bytes) -> list[tuple[int, bytes]]:
    """Each final answer in `data` (the whole of what the server wrote up to its close):
    (status, body); interim 100 Continue answers skipped. A `100 Continue` the close follows
    is no answer: the front invites a body when its app first waits for it, and the client's
    EOF may come just after (its request's body never whole), or just before (no invitation)."""
    out = []
    while data:
        client = h11.Connection(h11.CLIENT)
        client.send(h11.Request(method="POST", target="/", headers=[("Host", "127.0.0.1")]))
        client.send(h11.EndOfMessage())
        client.receive_data(data)
        client.receive_data(b"")
        status, body = 0, b""
        while True:
            try:
                event = client.next_event()
            except h11.RemoteProtocolError:
                if status or not data.startswith(b"HTTP/1.1 100 "):
                    raise  # a final answer cut short, or bytes that are no answer
                return out
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        out.append((status, body))
        data = client.trailing_data[0]
    return out


def converse(port: int, data: bytes, cuts: list[int], reads: list[bool]) -> bytes:
    """Send `data` in pieces, reading what came back after those `reads` says, then the EOF;
    everything the server wrote, read up to its close."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for start, end, read in zip([0, *cuts], [*cuts, len(data)], reads):
                sock.sendall(data[start:end])
                while read and select.select([sock], [], [], 0)[0]:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    received += chunk
            sock.shutdown(socket.SHUT_WR)
        while chunk := sock.recv(65536):  # a timeout here is a connection left open
            received += chunk
    return bytes(received)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_the_front_answers_what_h11_parses_in_order_then_closes(gateway, conversation):
    data, cuts, reads = conversation
    ids, broken = h11_reads(data)
    got = answers(converse(gateway.port, data, cuts, reads))
    assert [status for status, _ in got] == [200] * len(ids) + [400] * broken, (data, got)
    assert [orjson.loads(body)["id"] for _, body in got[:len(ids)]] == ids
    if broken:
        assert orjson.loads(got[-1][1])["status"] == 400  # problem details
