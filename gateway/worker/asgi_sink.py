"""A stream's sink, chosen for the server that serves it (`sink_for`): the front of HTTP/1.1
connections hands itself over in the request's scope (gateway/worker/http/front.py, sink.py's
`SCOPE_EXTENSION`); every stream hypercorn serves (HTTP/2) has the plain ASGI sink,
`AsgiSink`: its bytes as ASGI body sends, and its client's leaving. It follows no internals
of hypercorn: it is ASGI alone.

The hub drives its stream as it drives the front's (drivers.py: callbacks, one driver): `write`
keeps the body and answers blocked, the request's coroutine sends it (`carry`: one ASGI send
per wake-up, one DATA frame) and, once the send returned with nothing left, pokes the stream,
as the front does when its transport drained. The sends stay in the request's coroutine
because an ASGI response lasts as long as the app's call (hypercorn closes the stream when it
returns) and a send waits while HTTP/2 flow control shuts the stream's window, so a stalled
reader blocks its stream and it lags (hypercorn/h2_backpressure.py). A task of the sink's own
waits on `receive` for `http.disconnect` (a reset), so a stream learns at once that its
client left, not at its next write.

When the client leaves meanwhile (or the hub cuts a stream whose reader stopped reading),
a send waiting in the server is cancelled, so the stream ends and frees its place whatever
the server does with a departed stream.

An idle stream holds its sink for as long as it is open, so a sink keeps only what it uses
(slots, no callback object: the listener's `poke` is called).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from gateway.worker.delivery.sink import SCOPE_EXTENSION, Listener, Sink

Send = Callable[[dict], Awaitable[None]]
Receive = Callable[[], Awaitable[dict]]


def sink_for(scope: dict, send: Send, receive: Receive) -> Sink:
    """A stream's sink: the front, where it serves the stream (it handed itself over in the
    scope); the plain ASGI sink wherever hypercorn does."""
    sink = scope["extensions"].get(SCOPE_EXTENSION)
    return AsgiSink(send, receive) if sink is None else sink


class AsgiSink:
    __slots__ = ("_send", "_receive", "_watching", "_listener", "_pending", "_sending", "_cut", "_wake",
                 "_ending", "_over", "left")

    def __init__(self, send: Send, receive: Receive):
        self._send: Send | None = send  # None once `carry` is over
        self._receive: Receive | None = receive  # None once released
        self._watching: asyncio.Task | None = None  # waits on `receive` for the client's leaving
        self._listener: Listener | None = None  # poked: the client left, or the sink drained
        self._pending: bytes | None = None  # written, not yet sent
        self._sending: asyncio.Task | None = None  # the request's task, while it waits in a send
        self._wake: asyncio.Future | None = None  # what `carry` waits on for a body or the end
        self._cut = False  # this sink cancelled that send
        self._ending = False  # its end is sent after what is pending (`end_now`)
        self._over = False  # released: `carry` sends what it was given and returns
        self.left = False  # the client went away (or a send to it failed)

    @property
    def closed(self) -> bool:
        return self.left

    @property
    def blocked(self) -> bool:
        return self._pending is not None or self._sending is not None

    def write(self, body: bytes) -> bool:
        self._pending = body if self._pending is None else self._pending + body
        self._carry_on()
        return False

    def end_now(self) -> None:
        self._ending = True
        self._carry_on()

    def _carry_on(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def carry(self) -> None:
        try:
            while not self.left:
                if self._pending is not None:
                    body, self._pending = self._pending, None
                    await self._send_now({"type": "http.response.body", "body": body, "more_body": True})
                    if not self.blocked and not self.left and self._listener is not None:
                        self._listener.poke()  # drained: its stream goes on
                elif self._ending:
                    await self._send_now({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                elif self._over:
                    return
                else:
                    self._wake = asyncio.get_running_loop().create_future()
                    await self._wake
        except asyncio.CancelledError:  # not this sink's: the worker is stopping
            self._leave()
            raise
        finally:
            self._send = self._pending = self._wake = None

    async def _send_now(self, message: dict) -> None:
        """One send; a client gone meanwhile (its send cancelled by `_leave`, or failing) is
        the sink's leaving, never an error of the request's."""
        self._sending = asyncio.current_task()
        try:
            assert self._send is not None  # dropped only as `carry` returns
            await self._send(message)
        except asyncio.CancelledError:
            if not self._cut:
                raise  # not ours: the worker is stopping
            assert self._sending is not None  # set above, in this task
            self._sending.uncancel()
        except Exception:  # the peer went away mid-write
            self._leave()
        finally:
            self._sending = None

    def abort(self) -> None:
        """The connection is the server's (HTTP/2: shared with other streams): the stream is
        taken as gone, and a send it waits in is cancelled."""
        self._leave()

    def on_disconnect(self, listener: Listener) -> None:
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
            self._carry_on()
            if self._listener is not None:
                self._listener.poke()

    def release(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
        self._receive = self._watching = self._listener = None
        self._over = True
        self._carry_on()
