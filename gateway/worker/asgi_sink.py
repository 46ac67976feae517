"""A stream's sink, chosen for the server that serves it (`sink_for`): the front of HTTP/1.1
connections hands itself over in the request's scope (gateway/worker/http/front.py, sink.py's
`SCOPE_EXTENSION`); every stream hypercorn serves (HTTP/2) has the plain ASGI sink,
`AsgiSink`: its bytes as ASGI body sends, and its client's leaving. It follows no internals
of hypercorn: it is ASGI alone.

`write` keeps the body and answers blocked, so the stream's coroutine sends it in `drain`:
one ASGI send per wake-up, one DATA frame. A task of the sink's own waits on `receive` for
`http.disconnect` (a reset), so a stream learns at once that its client left, not at its
next write.

A send may wait for as long as the server will not take more: an HTTP/2 stream whose client
keeps its window shut. When the client leaves meanwhile, that send is cancelled, so the
stream ends and frees its place whatever the server does with a departed stream.

An idle stream holds its sink for as long as it is open, so a sink keeps only what it uses
(slots, no callback object: the listener's `poke` is called).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from gateway.worker.delivery.sink import SCOPE_EXTENSION, Sink

Send = Callable[[dict], Awaitable[None]]
Receive = Callable[[], Awaitable[dict]]


def sink_for(scope: dict, send: Send, receive: Receive) -> Sink:
    """A stream's sink: the front, where it serves the stream (it handed itself over in the
    scope); the plain ASGI sink wherever hypercorn does."""
    sink = scope["extensions"].get(SCOPE_EXTENSION)
    return AsgiSink(send, receive) if sink is None else sink


class AsgiSink:
    writes_at_once = False  # its bodies are ASGI sends: the hub drives it from a coroutine (drivers.py)

    __slots__ = ("_send", "_receive", "_watching", "_listener", "_pending", "_sending", "_cut", "left")

    def __init__(self, send: Send, receive: Receive):
        self._send: Send | None = send  # both None once released
        self._receive: Receive | None = receive
        self._watching: asyncio.Task | None = None  # waits on `receive` for the client's leaving
        self._listener = None  # has `poke()`, called once when the client leaves
        self._pending: bytes | None = None
        self._sending: asyncio.Task | None = None  # the stream's task, while it waits in a send
        self._cut = False  # this sink cancelled that send
        self.left = False  # the client went away (or a send to it failed)

    @property
    def closed(self) -> bool:
        return self.left

    @property
    def blocked(self) -> bool:
        return self._pending is not None

    def write(self, body: bytes) -> bool:
        self._pending = body if self._pending is None else self._pending + body
        return False

    async def drain(self) -> None:
        while self._pending is not None and not self.left:
            body, self._pending = self._pending, None
            self._sending = asyncio.current_task()
            try:
                assert self._send is not None  # released only once its stream is over
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
            except asyncio.CancelledError:
                if not self._cut:
                    raise  # not ours: the worker is stopping
                assert self._sending is not None  # set above, in this task
                self._sending.uncancel()
            except Exception:  # the peer went away mid-write
                self._leave()
            finally:
                self._sending = None
        self._pending = None

    async def end(self) -> None:
        await self.drain()  # what the last write left
        if not self.left:
            try:
                assert self._send is not None  # released only once its stream is over
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:
                pass

    def abort(self) -> None:
        """The connection is the server's (HTTP/2: shared with other streams): the stream is
        taken as gone, and a send it waits in is cancelled."""
        self._leave()

    def on_disconnect(self, listener) -> None:
        self._listener = listener
        self._watching = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while not self.left:
            assert self._receive is not None  # release cancels this task first
            if (await self._receive())["type"] == "http.disconnect":
                self._leave()

    def _leave(self) -> None:
        if not self.left:
            self.left = True
            if self._sending is not None:
                self._cut = True
                self._sending.cancel()
            if self._listener is not None:
                self._listener.poke()

    def release(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
        self._send = self._receive = self._watching = self._listener = None
