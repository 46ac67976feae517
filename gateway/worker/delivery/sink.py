"""How a stream's bytes leave the worker: the one interface every write goes through.

The hub hands each stream's body to its sink; the sink knows the server. A sink's `write`
never awaits, so the hub writes every parked stream in its own pass, with no coroutine
switch, and its one driver (drivers.py) runs every stream by callbacks: a sink answers
blocked while its bytes wait to leave, and pokes its listener when they left (or its client
did). Two servers have one each:

- the front of HTTP/1.1 connections (gateway/worker/http/), which is the connection's
  protocol: it writes to its transport at once, is blocked past its high-water mark, and
  pokes when the transport drained. It needs nothing of the request's coroutine
  (`carry` returns at once): an open stream holds no coroutine.
- the ASGI sink (gateway/worker/asgi_sink.py: a stream hypercorn serves, HTTP/2), whose sends
  are coroutines: it keeps the body, answers blocked, sends it from the request's coroutine
  (`carry`, which an ASGI response keeps until its end) and pokes when the send returned.

The server hands its sink to the app in the request's scope (`SCOPE_EXTENSION`, the front);
a request with none there is an ASGI server's (asgi_sink.sink_for).
"""

from __future__ import annotations

from typing import Protocol

# The scope's `extensions` key under which a server that is its streams' sink hands itself
# over (the front: gateway/worker/http/cycle.py's `scope_of`).
SCOPE_EXTENSION = "murgw.stream_sink"


def gone(scope: dict) -> bool:
    """The request's client has left: its connection, which the server handed over in the
    scope as its stream's sink, is closed. (Where none is there, an ASGI server's request is
    cancelled when its client leaves.)"""
    sink = scope["extensions"].get(SCOPE_EXTENSION)
    return sink is not None and sink.closed


class Listener(Protocol):
    def poke(self) -> None:
        """Something changed for the stream: its driver looks again (drivers.Served.poke)."""


class Sink(Protocol):
    @property
    def closed(self) -> bool:
        """The client left, or the connection broke: nothing more is written."""

    @property
    def blocked(self) -> bool:
        """Bytes wait to leave: no write until the sink pokes its listener."""

    def write(self, body: bytes) -> bool:
        """Take `body` (one SSE chunk of the stream). True: accepted, more may follow now;
        False: taken, but the sink is blocked until it pokes, or closed."""

    def end_now(self) -> None:
        """End the response body (the stream is over and the client is still there): written
        at once, or, by the ASGI sink, sent after what waits to leave."""

    def abort(self) -> None:
        """Give the client up now, however much waits to leave: a stream whose reader stopped
        reading, and that must end (a reload revoked it), is not held by its drain."""

    def on_disconnect(self, listener: Listener) -> None:
        """Call `listener.poke()` when the client leaves (it may already have), and when the
        sink drained. An object, not a callback: a bound method would cost every open stream
        another 64 bytes."""

    def release(self) -> None:
        """The stream is over: let go of the connection's objects (what is still to send of
        its end excepted)."""

    async def carry(self) -> None:
        """What the request's coroutine does for the stream once it is served: nothing for the
        front (it returns at once); the ASGI sink's sends, until the stream is over."""
