"""A stream's sink (sink.py) that is its connection's protocol: the front of HTTP/1.1
connections (front.py), from the stream's head on.

It reads nothing but the client's leaving (a FIN or a reset ends the stream at once), writes
each body as one chunk in one `transport.write` (the first with the response head before it:
one segment, one system call), and is blocked past the transport's high-water mark, so a
reader that stops reading falls behind and lags instead of being buffered without bound. It
writes, drains and ends at once, and pokes the stream's record when it drained or its client
left: the hub drives its stream by callbacks (drivers.py), and the request's coroutine has
nothing left to do for it (`carry`), so an open stream holds no coroutine.
"""

from __future__ import annotations

import asyncio

from gateway.tuning import CLOSE_GRACE_SECONDS
from gateway.worker.http.framing import LAST_CHUNK, chunk, cork_until_fin


class TransportSink(asyncio.Protocol):
    __slots__ = ("transport", "high_water", "left", "unsent", "framed", "_listener")

    def __init__(self, transport: asyncio.Transport | None):
        self.transport = transport
        self.high_water = 0 if transport is None else transport.get_write_buffer_limits()[1]
        self.left = False  # the client sent EOF, or the connection broke
        self.unsent = b""  # the response head, written with the first chunk
        self.framed = True  # chunked; False: an HTTP/1.0 answer, whose body ends with the connection
        self._listener = None

    # the protocol: the client's leaving, and the write side's flow
    def connection_lost(self, exc) -> None:
        self._leave()

    def resume_writing(self) -> None:
        if self._listener is not None:
            self._listener.poke()  # drained under the low-water mark: its stream goes on

    def _leave(self) -> None:
        if not self.left:
            self.left = True
            if self._listener is not None:  # a stream's: the hub ends it
                transport = self.transport
                if transport is not None and not transport.get_write_buffer_size():
                    # closed now, not at the hub's release a turn later: a poll between would
                    # report the client's EOF again for a descriptor libuv no longer reads,
                    # and cost an epoll_ctl DEL, then a failing one at the close
                    transport.close()
                self._listener.poke()

    # the sink
    @property
    def closed(self) -> bool:
        return self.left or self.transport is None or self.transport.is_closing()

    @property
    def blocked(self) -> bool:
        return self.transport.get_write_buffer_size() > self.high_water

    def write(self, body: bytes) -> bool:
        transport = self.transport
        data = chunk(body) if self.framed else body
        transport.write(self.headed(data) if self.unsent else data)
        return transport.get_write_buffer_size() <= self.high_water and not transport.is_closing()

    def headed(self, data: bytes) -> bytes:
        """`data` after the response head not yet written (`unsent`), which goes with it."""
        head, self.unsent = self.unsent, b""
        return head + data

    def end_now(self) -> None:
        """The terminating chunk, then the FIN, in one segment where the transport allows
        (`cork_until_fin`): the head said keep-alive, yet the connection closes after a stream,
        so a client that pools connections must find the close already there once it has
        read the response's end, or it sends its next request into it."""
        transport = self.transport
        if transport is None or self.closed:
            return
        cork_until_fin(transport)
        transport.write(self.headed(LAST_CHUNK if self.framed else b""))
        close(transport)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._leave()

    def on_disconnect(self, listener) -> None:
        self._listener = listener
        if self.left:
            listener.poke()

    async def carry(self) -> None:
        """Nothing: every write, drain and end is done at once (the request's run may end now)."""

    def release(self) -> None:
        transport, self.transport, self._listener = self.transport, None, None
        if transport is None or transport.is_closing():
            return
        if self.left and transport.get_write_buffer_size():
            transport.abort()  # its client left: what it never read is dropped, not kept for it
        else:
            transport.close()  # the stream is over: so is its connection
            drop_unsent_later(transport)


def close(transport: asyncio.Transport) -> None:
    """The FIN, then the close (a TLS transport writes no EOF: its close says it), and what
    is left unsent dropped after the grace."""
    try:
        transport.write_eof()
    except (NotImplementedError, OSError, RuntimeError):
        pass
    transport.close()
    drop_unsent_later(transport)


def drop_unsent_later(transport: asyncio.WriteTransport) -> None:
    """A closed transport that still holds bytes is aborted CLOSE_GRACE_SECONDS from now.

    uvloop keeps a closing transport (its descriptor, its buffer, its protocol) until its
    write buffer drains, which a client that never reads never lets happen. A TLS transport
    is given the timer whatever its own buffer says: the bytes may wait in the TCP transport
    beneath it, whose buffer it does not report. Aborting a transport already gone does nothing."""
    if transport.get_write_buffer_size() or transport.get_extra_info("ssl_object") is not None:
        asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, transport.abort)
