"""HTTP/2 limits refuse the extra stream, not the connection; DATA the app no longer reads
still gives the connection its window back.

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

Rows of the adapter's patch table (patches.py), installed only on the pinned hypercorn and h2.
"""

from __future__ import annotations

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.stream
from hyperframe.frame import RstStreamFrame
from hypercorn.protocol.h2 import H2Protocol

_original_receive_headers_frame = h2.connection.H2Connection._receive_headers_frame
_original_handle_events = H2Protocol._handle_events


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
    """hypercorn's event handling, less DATA for streams it has already let go of."""
    kept, opening = [], set()  # streams this batch opens are not in `streams` yet
    for event in events:
        if isinstance(event, h2.events.RequestReceived):
            opening.add(event.stream_id)
        if (isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams
                and event.stream_id not in opening):
            self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            try:
                self.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
            except h2.exceptions.StreamClosedError:
                pass  # already closed on h2's side too: its later DATA is h2's to answer
        else:
            kept.append(event)
    await _original_handle_events(self, kept)
