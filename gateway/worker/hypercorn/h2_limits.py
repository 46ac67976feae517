"""HTTP/2 limits: what a client sends is refused in the smallest unit that ends it (a stream
where one stream is at fault, the connection where the connection is), never with an
exception out of hypercorn (which asyncio logs with its traceback, the connection dropped
with no GOAWAY).

- **A stream over SETTINGS_MAX_CONCURRENT_STREAMS** (100 a connection) made the h2 library
  raise a connection error: GOAWAY, and every legitimate stream on the connection ended with
  it. RFC 9113 §5.1.2 lets a server refuse the one stream instead: `receive_headers_frame`
  decodes its header block (the HPACK table stays in step), answers `RST_STREAM
  REFUSED_STREAM`, and records the stream closed by that reset, so DATA the client already sent
  on it is answered and credited to the connection's window by h2 itself.
- **DATA for a stream whose answer is over.** hypercorn drops its stream once the app
  answered (a 413 before the body, a 401 from the head) while the client may still be
  sending the body; the next DATA frame then failed inside hypercorn and the connection
  closed, every other stream with it. `handle_events` credits such DATA to the connection and
  resets that stream (`NO_ERROR`: "stop sending", RFC 9113 §8.1) rather than passing it on.
- **A burst of streams opened and reset in one read.** hypercorn keeps each stream it opens in
  a `priority.PriorityTree` of at most 1,000 until its sending task has ended it; 1,100 ×
  (HEADERS with END_STREAM, RST_STREAM) in one write opened them all before that task ran, and
  the 1,001st raised `TooManyStreamsError`. `handle_events` ends such a connection before
  opening any of the batch: GOAWAY `ENHANCE_YOUR_CALM` and one warning line.
- **A head hypercorn cannot read**: a `:method`, `:path` or WebSocket handshake field (an
  extended CONNECT's) that is not ASCII, a CONNECT without `:path`. It is malformed (RFC
  9113 §8.1.1): `RST_STREAM PROTOCOL_ERROR` for that stream alone, its DATA credited as above.
- **PRIORITY signals.** hypercorn put each one's stream in the tree: 1,001 of them overfilled
  it, a chain 100 deep made a reprioritization a `PriorityLoop`, and a chain near 1,000 deep
  made the sending task's scheduling recurse past Python's limit. RFC 9113 §5.3.2 deprecates
  them and lets a server ignore them; `priority_updated` does, so the tree holds only the
  streams hypercorn opened, one level deep, and exactly those with a send buffer.

Rows of the adapter's patch table (patches.py), installed only on the pinned hypercorn, h2
and priority.
"""

from __future__ import annotations

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.stream
from hyperframe.frame import RstStreamFrame
from hypercorn.events import Closed
from hypercorn.protocol.h2 import H2Protocol

from gateway import logs

_original_receive_headers_frame = h2.connection.H2Connection._receive_headers_frame
_original_handle_events = H2Protocol._handle_events

log = logs.get("worker")
# what hypercorn decodes as ASCII: the request's method and path, and an extended CONNECT's
# (RFC 8441) WebSocket handshake fields (the app then refuses the WebSocket: door/admission.py)
ASCII_FIELDS = frozenset((b":method", b":path", b"sec-websocket-protocol", b"sec-websocket-extensions"))
BURST = "http/2 connection ended (ENHANCE_YOUR_CALM): more streams opened at once than hypercorn schedules"


def receive_headers_frame(self: h2.connection.H2Connection, frame):
    """h2's HEADERS handling; a stream past the concurrency limit is refused alone."""
    try:
        return _original_receive_headers_frame(self, frame)
    except h2.exceptions.TooManyStreamsError:
        h2.connection._decode_headers(self.decoder, frame.data)  # the header block still counts for HPACK
        self.highest_inbound_stream_id = max(self.highest_inbound_stream_id, frame.stream_id)
        self._closed_streams[frame.stream_id] = h2.stream.StreamClosedBy.SEND_RST_STREAM
        refusal = RstStreamFrame(frame.stream_id)
        refusal.error_code = h2.errors.ErrorCodes.REFUSED_STREAM
        return [refusal], []


async def handle_events(self: H2Protocol, events: list) -> None:
    """hypercorn's event handling, less a burst its priority tree would refuse, heads it
    cannot read, and DATA for streams it has already let go of."""
    requests = [event for event in events if isinstance(event, h2.events.RequestReceived)]
    if len(self.stream_buffers) + len(requests) > self.priority._maximum_streams:
        self.connection.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        await self._flush()
        await self.send(Closed())
        log.warning(BURST, streams_opened=len(requests), client=self.client[0] if self.client else None)
        return
    malformed = {event.stream_id for event in requests if _unreadable(event.headers)}
    for stream_id in malformed:
        _reset(self, stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)
    opening = {event.stream_id for event in requests} - malformed  # not in `streams` yet
    kept = []
    for event in events:
        if isinstance(event, h2.events.RequestReceived) and event.stream_id in malformed:
            continue
        if (isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams
                and event.stream_id not in opening):
            self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            _reset(self, event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
        else:
            kept.append(event)
    await _original_handle_events(self, kept)


def _reset(self: H2Protocol, stream_id: int, code: h2.errors.ErrorCodes) -> None:
    try:
        self.connection.reset_stream(stream_id, code)
    except h2.exceptions.StreamClosedError:
        pass  # the client reset it already (in the same read), or h2 closed it: nothing to say


async def priority_updated(self: H2Protocol, event: h2.events.PriorityUpdated) -> None:
    """A PRIORITY signal, ignored (RFC 9113 §5.3.2): streams are sent in the order they have data."""


def _unreadable(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request head is one hypercorn cannot make a request of: a field it decodes
    as ASCII that is not (`ASCII_FIELDS`), or no `:path` (h2 lets a CONNECT omit it)."""
    if not any(name == b":path" for name, _ in headers):
        return True
    return any(name in ASCII_FIELDS and not value.isascii() for name, value in headers)

