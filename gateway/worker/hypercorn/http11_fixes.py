"""Three HTTP/1.1 behaviours hypercorn's h11 path lacks, put right in one place.

- **The status line's reason phrase.** hypercorn builds each `h11.Response` without one, so
  the line is `HTTP/1.1 200 `; the protocol's listing shows `HTTP/1.1 200 OK`. Every response
  and informational response now carries RFC 9110's phrase (problem.py). hypercorn's own
  error answers (a malformed request 400, a head past its buffer 431) get the door's problem
  details instead of an empty body, so every refusal reads alike.
- **An event stream's end is the connection's end.** The protocol says "the body ends when
  the connection closes", and a reader may wait for EOF. A `text/event-stream` response
  keeps `connection: keep-alive` on its head (the spec's head), writes its terminating
  chunk, and then the connection closes instead of waiting for another request; the chunk
  and the FIN leave in one segment, so a client that pools connections finds the close
  with the response's end and never sends its next request into it.
- **A half-closed client gets its whole answer; a watcher's FIN is its leaving.** A client
  that sends its request and shuts its write side (`shutdown(SHUT_WR)`) is still reading.
  hypercorn took that EOF for a disconnect, and an idle connection lingered in CLOSE-WAIT
  until the header timeout. Now an EOF after a whole request lets a request/response answer
  run to its end, then closes; an EOF on an idle connection closes it at once. On an event
  stream an EOF is the watcher leaving (a killed `curl` sends a FIN, not a reset): the stream
  ends and frees its place at once, not at the next write to the gone client, whether the
  EOF came before its head or after. A reset is hypercorn's own `Closed`, as before.

Each replacement is a row of the adapter's patch table (patches.py), installed only on the
pinned hypercorn once the internals they follow are checked. What they note of a connection
(an event stream's close after its end, an EOF already taken) is kept in a `WeakKeyDictionary`
beside hypercorn's protocol object, not written onto it.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import h11
from hypercorn.events import Closed
from hypercorn.protocol.h11 import H11Protocol

from gateway.worker.http.framing import cork_until_fin
from gateway.worker.problem import PROBLEM_HEAD, problem_body, reason_phrase

EVENT_STREAM = b"text/event-stream"
HYPERCORN_ERROR_DETAIL = {400: "the request is not well-formed HTTP/1.1",
                          431: "the request head is larger than this door buffers",
                          501: "the request's transfer-encoding is not supported"}
_original_handle = H11Protocol.handle
_original_send_h11_event = H11Protocol._send_h11_event
_original_maybe_recycle = H11Protocol._maybe_recycle

CLOSE_AFTER = 1  # an event stream: the connection closes after its end
EOF_TAKEN = 2  # the client's clean EOF was seen (and acted on) once
_flags: WeakKeyDictionary[H11Protocol, int] = WeakKeyDictionary()


def _has(protocol: H11Protocol, flag: int) -> bool:
    return bool(_flags.get(protocol, 0) & flag)


def _note(protocol: H11Protocol, flag: int) -> None:
    _flags[protocol] = _flags.get(protocol, 0) | flag


def _with_reason(event):
    if isinstance(event, (h11.Response, h11.InformationalResponse)) and not event.reason:
        return type(event)(status_code=event.status_code, headers=event.headers.raw_items(),
                           http_version=event.http_version,
                           reason=reason_phrase(event.status_code).encode())
    return event


def _is_event_stream(event) -> bool:
    return isinstance(event, h11.Response) and any(
        name == b"content-type" and value.split(b";")[0].strip() == EVENT_STREAM
        for name, value in event.headers)


async def send_h11_event(self: H11Protocol, event) -> None:
    opens_stream = _is_event_stream(event)
    if opens_stream:
        _note(self, CLOSE_AFTER)
    elif isinstance(event, h11.EndOfMessage) and _has(self, CLOSE_AFTER):
        # the terminating chunk and the close that follows it, in one segment (carried.py)
        writer = getattr(_tcp_server(self), "writer", None)
        if writer is not None:
            cork_until_fin(writer.transport)
    await _original_send_h11_event(self, _with_reason(event))
    if opens_stream and _has(self, EOF_TAKEN):  # it left before its stream opened
        await self._close_stream()


async def maybe_recycle(self: H11Protocol) -> None:
    """After an event stream, or once the client sent EOF, close rather than wait for more."""
    if _has(self, CLOSE_AFTER) or self.connection.trailing_data[1]:
        await self._close_stream()
        await self.can_read.set()
        await self.send(Closed())
        return
    await _original_maybe_recycle(self)


def _tcp_server(self: H11Protocol):
    """hypercorn's TCPServer behind the protocol's send, with its reader and writer (the chain
    patches.py's table checks); None where it is not there."""
    return getattr(self.send, "__self__", None)


def _peer_sent_eof(self: H11Protocol) -> bool:
    """Whether the client shut its write side cleanly. h11 learns of an EOF only from an empty
    read, which hypercorn never makes when the EOF came with the request's last bytes, so the
    server's reader is asked too (a reset is not an EOF there: it is an exception)."""
    if not self.connection.trailing_data[1]:
        reader = getattr(_tcp_server(self), "reader", None)
        if reader is None or not reader.at_eof():
            return False
        self.connection.receive_data(b"")
    return True


async def handle(self: H11Protocol, event) -> None:
    """hypercorn sends `Closed` when the read side ends; a clean EOF after a whole request is
    a half-close: the answer runs on, and `maybe_recycle` closes after it. On an event stream
    it is the watcher leaving: the stream is closed (the app reads `http.disconnect`) at once,
    or, when the EOF came before the stream's head, as soon as that head is sent."""
    if isinstance(event, Closed) and not _has(self, EOF_TAKEN) and _peer_sent_eof(self):
        _note(self, EOF_TAKEN)
        if self.stream is None:  # idle: nothing left to answer
            await self.send(Closed())
            return
        if (not _has(self, CLOSE_AFTER)  # not (yet) an event stream
                and self.connection.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)):  # the request is whole
            return
    await _original_handle(self, event)


async def send_error_response(self: H11Protocol, status_code: int) -> None:
    body = problem_body(status_code, HYPERCORN_ERROR_DETAIL.get(status_code, reason_phrase(status_code).lower()))
    await self._send_h11_event(h11.Response(status_code=status_code, headers=[
        *PROBLEM_HEAD, (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
        *self.config.response_headers("h11")]))
    await self._send_h11_event(h11.Data(data=body))
    await self._send_h11_event(h11.EndOfMessage())

