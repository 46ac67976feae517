"""An HTTP/1.1 answer's bytes as h11 frames them, for every answer the front writes (front.py).

The bytes are those a client read when hypercorn's h11 answered: the status line with RFC
9110's reason phrase, the headers in the app's order and spelling, then what h11 adds where
the answer names no length: `Transfer-Encoding: chunked` (HTTP/1.1), or nothing and a close
at the body's end (an HTTP/1.0 request); and where the request does not keep the connection
(HTTP/1.0, `Connection: close`, the keep-alive request limit), `Connection: close` in place
of any connection header. A connection header the app wrote itself is kept as it wrote it.
"""

from __future__ import annotations

import asyncio
import socket
from typing import NamedTuple

from gateway.tuning import MAX_CACHED_HEADS
from gateway.worker.problem import PROBLEM_HEAD, problem_body, reason_phrase

LAST_CHUNK = b"0\r\n\r\n"
BODILESS = (204, 304)  # statuses whose answer has no body: h11 adds no framing
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
EVENT_STREAM = b"text/event-stream"


class Head(NamedTuple):
    """An answer's head as the front writes it, and what its headers say of the answer."""

    block: bytes  # the status line and header block
    chunked: bool  # its body is chunked
    closes: bool  # its own headers say the connection closes after it
    stream: bool  # an event stream's (text/event-stream)


_heads: dict[tuple, Head] = {}  # a few distinct heads (the stream's, each refusal's): made once each


def head(status: int, headers, keep_alive: bool = True, http10: bool = False) -> Head:
    """The answer's head. `keep_alive`: the request keeps the connection; `http10`: it is
    HTTP/1.0 (no chunks: a body of no stated length ends with the connection). A few distinct
    heads (the stream's, each refusal's) are made once each."""
    key = (status, tuple(headers), keep_alive, http10)
    found = _heads.get(key)
    if found is None:
        found = _made(status, headers, keep_alive, http10)
        if len(_heads) < MAX_CACHED_HEADS:
            _heads[key] = found
    return found


def _made(status: int, headers, keep_alive: bool, http10: bool) -> Head:
    delimited = status not in BODILESS and not any(name.lower() == b"content-length" for name, _ in headers)
    chunked = delimited and not http10
    closing = not keep_alive or (delimited and http10)
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason_phrase(status).encode())]
    for name, value in headers:
        lowered = name.lower()
        if (delimited and lowered == b"transfer-encoding") or (closing and lowered == b"connection"):
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    if chunked:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    if closing:
        lines.append(b"Connection: close\r\n")
    lines.append(b"\r\n")
    closes = any(name.lower() == b"connection" and b"close" in value.lower() for name, value in headers)
    stream = any(name.lower() == b"content-type" and value.split(b";")[0].strip() == EVENT_STREAM
                 for name, value in headers)
    return Head(b"".join(lines), chunked, closes, stream)


class _Framed:
    """The last body framed, and its frame: a pass hands the same shared batch (one bytes
    object, window.py's `Batch`) to every watcher in step, so it is framed once for all of
    them, not copied once per watcher. One entry: the bytes of one piece at most."""

    body: bytes = b""
    frame: bytes = LAST_CHUNK


def chunk(body: bytes) -> bytes:
    """`body` as one HTTP/1.1 chunk, framed as h11 frames it: one buffer for the transport,
    made once per body (`_Framed`). `writelines((size, body, CRLF))` (no copy, three buffers
    per write) showed no gain in memory or CPU, and fast readers beside stalled ones lagged no
    less often (loadtest/RESULTS.md, runs 4 and 5)."""
    if body is not _Framed.body:
        _Framed.frame = b"%x\r\n%b\r\n" % (len(body), body)
        _Framed.body = body
    return _Framed.frame


def error_answer(status: int, detail: str) -> bytes:
    """A refusal of a request that never reached the app (a malformed or ambiguous head, a
    head past the buffer): problem details, and the connection closes, in the bytes hypercorn's
    h11 wrote for its own error answers."""
    body = problem_body(status, detail)
    headers = [*PROBLEM_HEAD, (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    return head(status, headers).block + body


def cork_until_fin(transport: asyncio.Transport) -> None:
    """Hold what is written next in the kernel until the FIN (TCP_CORK: the shutdown that
    `write_eof` makes pushes it, the FIN flag on its last segment), for a stream's end. Plain TCP only: a TLS transport
    cannot write an EOF, and its end is its close_notify."""
    if not transport.can_write_eof():
        return
    try:
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    except (AttributeError, OSError):
        pass  # no socket, or the connection is going: the FIN follows as before
