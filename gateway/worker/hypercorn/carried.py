"""The lean stream connection: once an HTTP/1.1 stream's head is written, hypercorn lets it go.

Why: a stream's connection never returns to keep-alive (it closes when the stream ends,
http11_fixes.py), so once its head is written hypercorn's state for it (the TCPServer and its
task group, the protocol wrapper, H11Protocol, HTTPStream, h11's connection, asyncio's
reader, writer and stream protocol, the receive queue, and their suspended coroutines) serves
no purpose, yet an idle watcher's RSS was mostly those (loadtest/RESULTS.md, "Memory per
watcher, part by part").

How: `carrying` wraps the app. Each HTTP/1.1 request's app runs in a task of its own, given a
`Relay` for send and receive that forwards to hypercorn's. When the stream's sink is asked
for (direct.py's `sink_for`, after the head is written), `carry` moves the transport to a
`Carried`, one small protocol object that is also the stream's sink:

- the transport's protocol becomes the `Carried` (`set_protocol`): the read side is watched
  for EOF or reset only, and what a client sends after its request is dropped;
- the request's scope is emptied (hypercorn made it, and nothing reads it once the stream's
  head is written);
- hypercorn's writer is given a transport that does nothing (`CUT`), and its stream protocol
  is told the connection is lost: its read loop ends, its H11Protocol closes the request (the
  receive queue's `http.disconnect` reaches no one: the relay has let it go), and its task
  group ends once the relay has answered hypercorn's app call. Nothing of it is referenced
  from the stream any more;
- each chunk is framed as h11 frames it (`chunk`, direct.py's too) and written in one
  `transport.write`, and the end is the terminating chunk, a FIN and a close, as hypercorn
  wrote them, the chunk and the FIN in one segment: the bytes on the wire are today's
  (tests/test_carried.py compares them with the hypercorn path).

What this follows of asyncio's streams and uvloop's transports is in the patch table
(patches.CARRY, checked at start); where it moved, streams are served as before, by the
direct sink inside hypercorn. HTTP/2, HTTP/1.0, WebSocket and every non-stream answer never
leave hypercorn. When the server stops, `front.end_apps` gives the carried apps the grace
hypercorn gives its own, then cancels them.
"""

from __future__ import annotations

import asyncio

from gateway import logs
from gateway.worker.http.transport_sink import TransportSink

CARRIED_APPS: set[asyncio.Task] = set()

log = logs.get("worker")


class Relay:
    """The app's send and receive for one HTTP/1.1 request: hypercorn's until the stream is
    carried, nothing after (the app's frames then hold no reference into hypercorn). It
    keeps the request's scope until then, to empty it once carried (`carry`)."""

    __slots__ = ("send_to", "receive_from", "carried", "scope")

    def __init__(self, send, receive, carried: asyncio.Future, scope: dict):
        self.send_to, self.receive_from, self.carried, self.scope = send, receive, carried, scope

    async def send(self, message: dict) -> None:
        if self.send_to is not None:
            await self.send_to(message)

    async def receive(self) -> dict:
        if self.receive_from is None:
            return {"type": "http.disconnect"}
        return await self.receive_from()

    def let_go(self) -> None:
        self.send_to = self.receive_from = self.scope = None
        if not self.carried.done():
            self.carried.set_result(None)
        self.carried = None


def relay_of(send) -> Relay | None:
    relay = getattr(send, "__self__", None)
    return relay if isinstance(relay, Relay) else None


def carrying(app):
    """`app`, each HTTP/1.1 request run in a task that outlives hypercorn's call once carried."""
    async def serve_request(scope, receive, send):
        if scope["type"] != "http" or scope.get("http_version") != "1.1":
            return await app(scope, receive, send)
        carried = asyncio.get_running_loop().create_future()
        relay = Relay(send, receive, carried, scope)
        task = asyncio.ensure_future(app(scope, relay.receive, relay.send))
        try:
            await asyncio.wait((task, carried), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if not carried.done():
                task.cancel()
            raise
        if not task.done():  # carried: the app serves its stream on, in its own task
            CARRIED_APPS.add(task)
            task.add_done_callback(_carried_app_done)
            return None
        relay.let_go()
        return task.result()
    return serve_request


def _carried_app_done(task: asyncio.Task) -> None:
    CARRIED_APPS.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("a carried stream's app failed", error=repr(task.exception()))


class CutTransport:
    """What hypercorn's writer is left holding once its connection is carried: every call a no-op."""

    def write(self, data) -> None:
        pass

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return True

    def get_extra_info(self, name, default=None):
        return default


CUT = CutTransport()


class Carried(TransportSink):
    """A carried stream's connection: its transport's protocol and the stream's sink (sink.py)."""

    __slots__ = ()

    def data_received(self, data: bytes) -> None:
        pass  # a stream's request is whole: nothing more is read

    def eof_received(self) -> None:
        self._leave()  # a watcher's FIN is its leaving (None: the transport closes)


def carry(relay: Relay, writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> Carried | None:
    """Move the connection behind `writer` out of hypercorn, its stream's head written; None
    where it is closing already (hypercorn ends it, as before)."""
    transport = writer.transport
    if transport.is_closing():
        return None
    inbox = getattr(relay.receive_from, "__self__", None)
    left = reader.at_eof() or any(message["type"] == "http.disconnect"
                                  for message in getattr(inbox, "_queue", ()))
    stream_protocol = transport.get_protocol()
    carried = Carried(transport, left, bool(getattr(stream_protocol, "_paused", False)))
    transport.set_protocol(carried)
    writer._transport = CUT
    # The scope is read for the last time when the stream opens, and hypercorn, which made
    # it, lets the connection go here: what it holds (headers, addresses, path, extensions,
    # ~0.5 KiB) goes with it. The dict stays, empty, in our app's frames.
    relay.scope.clear()
    relay.let_go()
    stream_protocol.connection_lost(None)  # hypercorn's read loop ends; its request closes
    return carried
