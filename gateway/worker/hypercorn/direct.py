"""The direct sink: a stream's body written straight to its transport, past hypercorn's per-send path.

Why: hypercorn turns each ASGI body send into an h11 `Data` event, a chunk, a lock, a
`StreamWriter.write` and a `drain`, and each send needs the stream's coroutine to run. A
fan-out gateway makes about one send per event per watcher, so that path was most of a
worker's time (profile in loadtest/RESULTS.md). With a direct sink the hub writes every
parked stream's pending events synchronously, in one pass, one `transport.write` each.

The response head still goes through hypercorn, and so does the end of the body (ASGI
`more_body: False`), so h11's state machine and keep-alive bookkeeping stay true: h11
tracks no byte count for a chunked body, and between head and end nothing else writes on
this connection (HTTP/1.1 answers one request at a time). In between, the chunks are ours
to frame: `<hex length>\\r\\n<bytes>\\r\\n`.

Only where hypercorn's asyncio HTTP/1.1 path is behind the ASGI `send` and h11 chose
chunked framing; anywhere else (HTTP/1.0, HTTP/2, another server) `find` answers None and
the stream gets the ASGI sink. The attributes `find` follows are rows of the adapter's patch
table (patches.py: hypercorn 0.18.0's and h11 0.16.0's), checked at start: where one moved,
no stream gets this sink.
"""

from __future__ import annotations

import asyncio

import h11
from h11._writers import ChunkedWriter

from gateway.worker.http.framing import chunk
from gateway.worker.http.front import Front
from gateway.worker.hypercorn import carried, lean
from gateway.worker.hypercorn.asgi import AsgiSink, Connection, Receive, Send


class DirectSink(Connection):
    """Body chunks to the transport; the end, and the client's leaving, as the ASGI sink."""

    __slots__ = ("writer", "transport", "high_water")

    def __init__(self, send: Send, receive: Receive, writer: asyncio.StreamWriter):
        super().__init__(send, receive)
        self.writer = writer
        self.transport = writer.transport
        # Past the transport's high-water mark the sink is blocked until it drains, as
        # hypercorn's own send would be: a reader that stops reading falls behind and lags.
        self.high_water = self.transport.get_write_buffer_limits()[1]
        lean.slim_stream_protocol(writer)

    @property
    def closed(self) -> bool:
        return self.left or self.transport.is_closing()

    @property
    def blocked(self) -> bool:
        return self.transport.get_write_buffer_size() > self.high_water

    def write(self, body: bytes) -> bool:
        """False past the high-water mark, and when the write failed (the peer reset; a FIN is
        noticed on the read side, http11_fixes.py)."""
        transport = self.transport
        transport.write(chunk(body))
        return transport.get_write_buffer_size() <= self.high_water and not transport.is_closing()

    async def drain(self) -> None:
        try:
            await self.writer.drain()
        except Exception:  # the peer went away while we waited
            self._leave()

    def abort(self) -> None:
        """Close the connection at once, unsent bytes dropped: the drain waiting on it returns."""
        self.transport.abort()
        self._leave()

    def release(self) -> None:
        super().release()
        self.writer = self.transport = None


def _writer_of(send: Send) -> tuple[asyncio.StreamWriter, asyncio.StreamReader] | None:
    """hypercorn's writer and reader behind its ASGI send, once the response head is sent
    and h11 chose chunked framing; None anywhere else."""
    http_stream = getattr(send, "__self__", None)
    protocol = getattr(getattr(http_stream, "send", None), "__self__", None)
    server = getattr(getattr(protocol, "send", None), "__self__", None)
    connection = getattr(protocol, "connection", None)
    writer = getattr(server, "writer", None)
    if not isinstance(connection, h11.Connection) or not isinstance(writer, asyncio.StreamWriter):
        return None
    if connection.our_state is not h11.SEND_BODY or not isinstance(getattr(connection, "_writer", None),
                                                                   ChunkedWriter):
        return None
    return writer, server.reader


def find(send: Send, receive: Receive) -> DirectSink | None:
    """The direct sink behind hypercorn's ASGI send, once the response head is sent."""
    found = _writer_of(send)
    return None if found is None else DirectSink(send, receive, found[0])


def sink_for(send: Send, receive: Receive):
    """The fastest sink this connection allows: carried out of hypercorn (carried.py) where
    the app runs under `carrying`, else direct where found, else ASGI. A stream the front
    serves (gateway/worker/http/front.py) is its own sink: its send is the front's."""
    front = getattr(send, "__self__", None)
    if isinstance(front, Front):
        return front
    relay = carried.relay_of(send)
    if relay is not None:
        found = _writer_of(relay.send_to)
        lean = None if found is None else carried.carry(relay, *found)
        if lean is not None:
            return lean
        send, receive = relay.send_to, relay.receive_from  # served inside hypercorn, as before
    return find(send, receive) or AsgiSink(send, receive)
