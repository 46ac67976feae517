"""Plain HTTP sent to the TLS port: answered `400` in plain HTTP, saying the port speaks HTTPS.

A TLS handshake fails on `GET / HTTP/1.1`, and the client read a bare close ("empty reply",
"connection reset") that names nothing. As nginx does ("The plain HTTP request was sent to
HTTPS port"), the burst accept loop (http/accept.py) looks at a new connection's first byte before
it starts TLS: every TLS record starts with a content type (0x14-0x18; a ClientHello 0x16, an
SSLv2-style hello has its top bit set), every HTTP/1.x request with its method's uppercase
letter. A connection that starts with a letter is answered `400` with problem details
(problem.py) and `connection: close`, and closed; any other byte goes on to the handshake.

Bounded like a handshake: the wait for the first byte, and the whole answer, each within the
handshake timeout (--header-timeout), and the wait counts against the handshake's own time.
What the client sent is read and dropped (at most DRAIN_BYTES) until it closes, so the
server's close is a FIN after the answer, not a reset that could discard it unread.
"""

from __future__ import annotations

import asyncio
import socket
import string

from gateway import logs
from gateway.tuning import DRAIN_BYTES
from gateway.worker.problem import PROBLEM_TYPE, problem_body, reason_phrase

DETAIL = "this port speaks HTTPS: the plain HTTP request was sent to an HTTPS port; use https://"
HTTP_FIRST_BYTES = frozenset(string.ascii_uppercase.encode())

log = logs.get("worker")


def answer() -> bytes:
    """The whole HTTP/1.1 400 response, head and problem-details body."""
    body = problem_body(400, DETAIL)
    return (f"HTTP/1.1 400 {reason_phrase(400)}\r\ncontent-type: {PROBLEM_TYPE}\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


async def _first_byte(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    """The connection's first byte, left in the socket for the handshake; b"" when it closed."""
    readable = loop.create_future()

    def readable_now() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), readable_now)
    try:
        await readable
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv(1, socket.MSG_PEEK)


async def _refuse(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    await loop.sock_sendall(conn, answer())
    conn.shutdown(socket.SHUT_WR)
    drained = 0
    while drained < DRAIN_BYTES and (data := await loop.sock_recv(conn, DRAIN_BYTES)):
        drained += len(data)


def _peer(conn: socket.socket) -> str:
    try:
        return str(conn.getpeername()[0])
    except OSError:
        return ""


async def tls_time_left(loop: asyncio.AbstractEventLoop, conn: socket.socket, timeout: float) -> float | None:
    """How much of the handshake's `timeout` is left once a connection's first byte says TLS;
    None when it said plain HTTP (answered and closed here), or when it closed or sent nothing
    in time (closed here too)."""
    deadline, left = loop.time() + timeout, None
    try:
        async with asyncio.timeout_at(deadline):
            first = await _first_byte(loop, conn)
        if first and first[0] not in HTTP_FIRST_BYTES:
            left = max(deadline - loop.time(), 1e-3)  # uvloop takes no handshake timeout of 0
        elif first:
            # before any request is parsed, so not an access-log line: its own, at the same level
            log.info("plain HTTP on the TLS port", status=400, client=_peer(conn))
            async with asyncio.timeout(timeout):
                await _refuse(loop, conn)
    except (OSError, TimeoutError):
        pass
    finally:
        if left is None:
            conn.close()
    return left
