"""How a stream's bytes leave the worker: the one interface every write goes through.

The hub hands each stream's body to its sink; the sink knows the server. A sink's `write`
never awaits, so the hub writes every parked stream in its own pass, with no coroutine
switch. Two kinds, by `writes_at_once`:

- True: the front of HTTP/1.1 connections (gateway/worker/http/), which is the connection's
  protocol. It writes, drains and ends at once: the hub drives its stream with no coroutine
  (`Hub.adopt`), and the sink pokes its listener when it drained, as when its client left.
- False: an ASGI send is a coroutine (a stream hypercorn serves: HTTP/2). Such a sink keeps
  the body and answers blocked; the stream's coroutine (`Hub.serve`) then awaits `drain`,
  which sends it, and `end`.

The server hands its sink to the app in the request's scope (`SCOPE_EXTENSION`, the front);
a request with none there is an ASGI server's (asgi_sink.sink_for).
"""

from __future__ import annotations

from typing import Protocol

# The scope's `extensions` key under which a server that is its streams' sink hands itself
# over (the front: gateway/worker/http/cycle.py's `scope_of`).
SCOPE_EXTENSION = "murgw.stream_sink"


class Listener(Protocol):
    def poke(self) -> None:
        """Something changed for the stream: its driver looks again (drivers.Served.poke)."""


class Sink(Protocol):
    writes_at_once: bool  # see the module's docstring

    @property
    def closed(self) -> bool:
        """The client left, or the connection broke: nothing more is written."""

    @property
    def blocked(self) -> bool:
        """Bytes wait to leave: no write until `drain` returns."""

    def write(self, body: bytes) -> bool:
        """Take `body` (one SSE chunk of the stream). True: accepted, more may follow now;
        False: taken, but the sink is blocked until `drain`, or closed."""

    async def drain(self) -> None:
        """Until what was written has left or the sink is closed; never raises (not
        `writes_at_once`)."""

    async def end(self) -> None:
        """End the response body (the stream is over and the client is still there; not
        `writes_at_once`: that kind ends with `end_now`)."""

    def abort(self) -> None:
        """Give the client up now, however much waits to leave: a stream whose reader stopped
        reading, and that must end (a reload revoked it), is not held by its drain."""

    def on_disconnect(self, listener: Listener) -> None:
        """Call `listener.poke()` once when the client leaves (it may already have). An object,
        not a callback: a bound method would cost every open stream another 64 bytes."""

    def release(self) -> None:
        """The stream is over: let go of the connection's objects."""


class AtOnceSink(Sink, Protocol):
    """A sink that `writes_at_once` (the front's): its stream's end is written at once."""

    def end_now(self) -> None:
        """End the response body now (the stream is over and the client is still there)."""
