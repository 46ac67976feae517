"""An HTTP/2 connection with no open stream ends within --header-timeout, and no close of
hypercorn's keeps a connection for a client that never reads.

hypercorn 0.18.0 closes a connection its idle task finds idle for `keep_alive_timeout` (the
gateway sets it to --header-timeout, serving.py). The task runs while the protocol says it is
idle (`Updated(idle=True)`) and stops on `Updated(idle=False)`. On a prior-knowledge connection
its h11 part reads the preface's `PRI * HTTP/2.0` as a request and stops the task before it
switches to HTTP/2, and nothing starts it again until a stream ends: 24 bytes and silence held
a connection for ever (issue 47; 2,000 of them took a worker's descriptors). `initiate` says
the new HTTP/2 protocol is idle as soon as it starts, whichever way it started (prior
knowledge, ALPN `h2`), so the task runs from the preface on; `idle_again` says it again when a
stream's close leaves none open, however the stream ended.

At the timeout hypercorn only closed the transport. `idle_timeout` sends GOAWAY (NO_ERROR,
the last stream it processed) first, as RFC 9113 §6.8 asks of a server that ends a connection,
without waiting for the write to drain; it counts the connection in the worker's
`connections_idle` gauge while it waits, and `read_data` ends the wait with the connection.
Every close of hypercorn's (`close`, and the idle one) then gives what is unsent
CLOSE_GRACE_SECONDS before the abort (gateway/worker/http/transport_sink.py): uvloop keeps a
closing transport until its buffer drains, and `wait_closed` waited for that for ever.

Rows of the adapter's patch table (patches.py), in the H2 guarantee: where they moved, HTTP/2
is not offered.
"""

from __future__ import annotations

import asyncio

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Closed, Updated
from hypercorn.protocol.h2 import H2Protocol

from gateway.common.metrics import IDLE_GAUGE
from gateway.worker.http.transport_sink import drop_unsent_later

_original_initiate = H2Protocol.initiate
_original_close = TCPServer._close
_original_read_data = TCPServer._read_data


async def initiate(self: H2Protocol, headers=None, settings=None) -> None:
    """`H2Protocol.initiate`, then the idle task started: a connection with no stream is idle."""
    await _original_initiate(self, headers, settings)
    if self.idle:
        await self.send(Updated(idle=True))


async def idle_again(self: H2Protocol) -> None:
    """After a stream is closed (h2_backpressure.close_stream): a connection left with none is
    idle. hypercorn said so only when the stream's app ended on a stream still open, so a stream
    its client reset (`RST_STREAM`) left the connection counted busy, its idle task stopped, for ever."""
    if self.idle and not self.closed:
        await self.send(Updated(idle=True))


async def idle_timeout(self: TCPServer) -> None:
    """`TCPServer._idle_timeout`: counted idle while it waits; at the timeout, GOAWAY and the close."""
    counters = _counters(self)
    if counters is not None:
        counters.add(IDLE_GAUGE)
    try:
        try:
            await asyncio.wait_for(self.context.terminated.wait(), self.config.keep_alive_timeout)
        except TimeoutError:
            pass
    finally:
        if counters is not None:
            counters.sub(IDLE_GAUGE)
    await asyncio.shield(_close_idle(self))


async def _close_idle(self: TCPServer) -> None:
    protocol = self.protocol.protocol
    if isinstance(protocol, H2Protocol) and not protocol.closed:
        protocol.connection.close_connection()
        self.writer.write(protocol.connection.data_to_send())  # not drained: its reader may never read
    await self.protocol.handle(Closed())
    self.writer.close()
    drop_unsent_later(self.writer.transport)


async def read_data(self: TCPServer) -> None:
    """`TCPServer._read_data`, then the idle task stopped: the connection has ended (its client's
    FIN or reset, or a close), and hypercorn's task group waited for that task, so a connection
    its client closed was held, and counted idle, until the timeout."""
    await _original_read_data(self)
    await self.idle_task.stop()


async def close(self: TCPServer) -> None:
    """`TCPServer._close`, with what is unsent dropped after the grace (its `wait_closed` returns then)."""
    drop_unsent_later(self.writer.transport)
    await _original_close(self)


def _counters(self: TCPServer):
    return getattr(self.context, "counters", None)  # the worker's (serving.H2Context)
