"""Four HTTP/1.1 behaviours hypercorn's h11 path lacks, put right in one place.

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
- **No ambiguous head is served, and no h2c upgrade.** Every request head h11 reads (the
  first of a connection and every keep-alive one) passes the door's head rules
  (gateway/worker/door/head.py): a bare LF or a folded line (`maybe_extract_lines`, h11's own
  split, so trailers too), an HTTP version other than 1.0/1.1 (505), a lower-case method
  (501), Content-Length with Transfer-Encoding (400) are refused with problem details and the
  connection closed, so nothing pipelined behind them is read. An absolute-form target
  (`POST http://host/`) is served as its origin form, its authority as Host (RFC 9112
  §3.2.2). `Upgrade: h2c` is ignored (answered over HTTP/1.1) unless `--h2c-upgrade on`,
  and then too unless the request carries one `HTTP2-Settings` h2 can apply (RFC 7540
  §3.2.1): one it could not decode failed in hypercorn after its 101. HTTP/2 prior knowledge (the `PRI *` preface) is served as before. Bytes after a request
  that closes the connection (HTTP/1.0, `Connection: close`) are discarded, never read as a
  malformed request: two HTTP/1.0 requests in one write get the first answered, then the close.
- **Every refusal counts.** Each of these answers (and hypercorn's own 400, 431 and 501)
  counts in `murgw_requests_refused_total` as the door's refusals do (`count_refusal`: an
  ambiguous head as `ambiguous`), through the counters serving.py hands hypercorn's config.

Each replacement is a row of the adapter's patch table (patches.py), installed only on the
pinned hypercorn once the internals they follow are checked. What they note of a connection
(an event stream's close after its end, an EOF already taken) is kept in a `WeakKeyDictionary`
beside hypercorn's protocol object, not written onto it.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import h11
import h2.exceptions
from h11._receivebuffer import ReceiveBuffer
from h2.config import H2Configuration
from h2.connection import H2Connection
from hypercorn.events import Closed
from hyperframe.exceptions import HyperframeError
from hypercorn.protocol.h11 import H11Protocol

from gateway.worker.door.head import line_problem, origin_form, request_problem
from gateway.worker.door.refusal import count_refusal
from gateway.worker.http.framing import cork_until_fin
from gateway.worker.problem import PROBLEM_HEAD, problem_body, reason_phrase

EVENT_STREAM = b"text/event-stream"
HYPERCORN_ERROR_DETAIL = {400: "the request is not well-formed HTTP/1.1",
                          431: "the request head is larger than this door buffers",
                          501: "the request's transfer-encoding is not supported"}
_original_handle = H11Protocol.handle
_original_check_protocol = H11Protocol._check_protocol
_original_create_stream = H11Protocol._create_stream
_original_extract_lines = ReceiveBuffer.maybe_extract_lines
_original_next_receive_event = h11.Connection._extract_next_receive_event
_original_send_h11_event = H11Protocol._send_h11_event
_original_maybe_recycle = H11Protocol._maybe_recycle

CLOSE_AFTER = 1  # an event stream: the connection closes after its end
EOF_TAKEN = 2  # the client's clean EOF was seen (and acted on) once
_flags: WeakKeyDictionary[H11Protocol, int] = WeakKeyDictionary()
_refusals: WeakKeyDictionary[H11Protocol, tuple[int, str]] = WeakKeyDictionary()  # check -> create
_line_problems: WeakKeyDictionary[ReceiveBuffer, str] = WeakKeyDictionary()  # split -> error answer


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
        # the terminating chunk and the close that follows it, in one segment (as the front's end)
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


def maybe_extract_lines(self: ReceiveBuffer):
    """h11's head split, refusing a bare LF or an obs-fold (h11 answers 400 and closes;
    the answer names the problem, noted here, as the front's does)."""
    before = len(self._data)
    lines = _original_extract_lines(self)
    problem = line_problem(lines, before - len(self._data)) if lines else None
    if problem is not None:
        _line_problems[self] = problem
        raise h11.LocalProtocolError(problem)
    return lines


def extract_next_receive_event(self: h11.Connection):
    """h11's next event, once the client's request closes the connection: what it sent after
    that request is dropped (h11 took it for a malformed request and answered 400 in place of
    the request's own answer)."""
    if self.their_state is h11.MUST_CLOSE and self._receive_buffer:
        self._receive_buffer = ReceiveBuffer()
    return _original_next_receive_event(self)


async def check_protocol(self: H11Protocol, event: h11.Request) -> None:
    """The door's head rules for every request; hypercorn's protocol switches only for the
    HTTP/2 preface, and for `Upgrade: h2c` where the option allows it."""
    if event.method == b"PRI" and event.target == b"*" and event.http_version == b"2.0":
        await _original_check_protocol(self, event)  # prior knowledge: raises to switch to h2
    refusal = request_problem(event.method, event.http_version, event.headers)
    if refusal is not None:
        _refusals[self] = refusal
    elif getattr(self.config, "h2c_upgrade", False) and _upgrade_settings_apply(event.headers):
        await _original_check_protocol(self, event)


def _upgrade_settings_apply(headers) -> bool:
    """Whether the head carries exactly one `HTTP2-Settings` and h2 can apply it, as the
    upgraded connection would."""
    values = [value for name, value in headers if name == b"http2-settings"]
    if len(values) != 1:
        return False
    try:
        H2Connection(H2Configuration(client_side=False)).initiate_upgrade_connection(values[0])
    except (ValueError, HyperframeError, h2.exceptions.ProtocolError):  # base64, frame, setting
        return False
    return True


async def create_stream(self: H11Protocol, request: h11.Request) -> None:
    """A refused head is answered and the connection closed, with no stream; an absolute-form
    target is served as its origin form, its authority the Host."""
    refusal = _refusals.pop(self, None)
    if refusal is not None:
        await send_error_response(self, *refusal)
        await self.send(Closed())
        return
    absolute = origin_form(request.target)
    if absolute is not None:
        authority, target = absolute
        request = h11.Request(method=request.method, target=target, http_version=request.http_version,
                              headers=[(b"host", authority), *((name, value) for name, value in request.headers
                                                               if name != b"host")])
    await _original_create_stream(self, request)


async def send_error_response(self: H11Protocol, status_code: int, detail: str | None = None) -> None:
    detail = (detail or _line_problems.pop(self.connection._receive_buffer, None)
              or HYPERCORN_ERROR_DETAIL.get(status_code, reason_phrase(status_code).lower()))
    counters = getattr(self.config, "counters", None)  # serving.py's; none on a bare hypercorn config
    if counters is not None:
        count_refusal(counters, status_code, detail)
    body = problem_body(status_code, detail)
    await self._send_h11_event(h11.Response(status_code=status_code, headers=[
        *PROBLEM_HEAD, (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
        *self.config.response_headers("h11")]))
    await self._send_h11_event(h11.Data(data=body))
    await self._send_h11_event(h11.EndOfMessage())

