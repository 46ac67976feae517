"""A stream's body written straight to its socket, past hypercorn's per-send path.

Why: hypercorn turns each ASGI body send into an h11 `Data` event, a chunk, a lock, a
`StreamWriter.write` and a `drain`, and each send needs the stream's coroutine to run. A
fan-out gateway makes about one send per event per watcher, so that path was most of a
worker's time (profile in loadtest/RESULTS.md). With a direct body the hub writes every
parked stream's pending events synchronously, in one pass, one `transport.write` each.

The response head still goes through hypercorn, and so does the end of the body (ASGI
`more_body: False`), so h11's state machine and keep-alive bookkeeping stay true: h11
tracks no byte count for a chunked body, and between head and end nothing else writes on
this connection (HTTP/1.1 answers one request at a time). In between, the chunks are ours
to frame: `<hex length>\\r\\n<bytes>\\r\\n`.

Only where hypercorn's asyncio HTTP/1.1 path is behind the ASGI `send` and h11 chose
chunked framing; anywhere else (HTTP/1.0, HTTP/2, another server) `find` answers None and
the stream uses ASGI sends. hypercorn is pinned in pyproject.toml for these attribute
names; tests/test_direct_body.py fails if a new release moves them.
"""

from __future__ import annotations

import asyncio

import h11
from h11._writers import ChunkedWriter

from gateway.worker import lean

RAW_SEND = "murgw.raw_send"  # scope key: the server's own ASGI send, before Starlette wraps it


class DirectBody:
    __slots__ = ("writer", "transport", "high_water")

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.transport = writer.transport
        # Past the transport's high-water mark the stream stops writing and awaits `drain`,
        # as hypercorn's own send would: a reader that stops reading falls behind and lags.
        self.high_water = self.transport.get_write_buffer_limits()[1]
        lean.slim_stream_protocol(writer)

    @property
    def closed(self) -> bool:
        return self.transport.is_closing()

    @property
    def blocked(self) -> bool:
        return self.transport.get_write_buffer_size() > self.high_water

    def write(self, body: bytes) -> None:
        self.transport.write(b"%x\r\n%b\r\n" % (len(body), body))

    async def drain(self) -> None:
        await self.writer.drain()


def find(raw_send) -> DirectBody | None:
    """The direct body behind hypercorn's ASGI send, once the response head is sent."""
    http_stream = getattr(raw_send, "__self__", None)
    protocol = getattr(getattr(http_stream, "send", None), "__self__", None)
    server = getattr(getattr(protocol, "send", None), "__self__", None)
    connection = getattr(protocol, "connection", None)
    writer = getattr(server, "writer", None)
    if not isinstance(connection, h11.Connection) or not isinstance(writer, asyncio.StreamWriter):
        return None
    if connection.our_state is not h11.SEND_BODY or not isinstance(connection._writer, ChunkedWriter):
        return None
    return DirectBody(writer)
