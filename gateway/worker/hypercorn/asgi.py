"""The plain ASGI sink: a stream's bytes as ASGI body sends, and its client's leaving.

Every server can take it: HTTP/1.0 (a close-delimited body), HTTP/2, or a hypercorn whose
internals direct.py no longer finds. `write` keeps the body and answers blocked, so the
stream's coroutine sends it in `drain`: one ASGI send per wake-up.

How a sink learns its client left (`Connection`, which the direct sink shares): where the
receive queue is an `Inbox` (the patch table's `spawn_app` makes one per request), the queue
tells the sink of each message it takes (no task waits on `receive`); anywhere else a task of the sink's own waits on `receive` for
`http.disconnect`. An idle stream holds its sink for as long as it is open, so a sink keeps
only what it uses (slots, no callback object: the listener's `poke` is called).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from gateway.worker.hypercorn.lean import LeanQueue, spawn_app_over

Send = Callable[[dict], Awaitable[None]]
Receive = Callable[[], Awaitable[dict]]


class Inbox(LeanQueue):
    """A request's receive queue that tells `on_put` of each message the server queues for the
    app, so a stream learns of `http.disconnect` without a task of its own waiting on `receive`."""

    on_put = None

    def put_nowait(self, item) -> None:  # `put` ends here too
        super().put_nowait(item)
        if self.on_put is not None:
            self.on_put(item)


spawn_app = spawn_app_over(Inbox)  # hypercorn's TaskGroup.spawn_app, in the patch table (patches.py)


class Connection:
    """The ASGI connection behind a sink: the end of the body, and the client's leaving."""

    writes_at_once = False  # its bodies are ASGI sends: the hub drives it from a coroutine (hub.py)

    __slots__ = ("_send", "_receive", "_receiving", "_listener", "left")

    def __init__(self, send: Send, receive: Receive):
        self._send = send
        self._receive = receive
        self._receiving: Inbox | asyncio.Task | None = None  # the queue told of messages, or our task
        self._listener = None  # has `poke()`, called once when the client leaves
        self.left = False  # the client went away (or a write to it failed)

    @property
    def closed(self) -> bool:
        return self.left

    async def end(self) -> None:
        if not self.closed:
            try:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:
                pass

    def on_disconnect(self, listener) -> None:
        self._listener = listener
        inbox = getattr(self._receive, "__self__", None)  # hypercorn's receive queue, where patched
        if isinstance(inbox, Inbox):
            self._receiving = inbox
            inbox.on_put = self._on_receive
            while not inbox.empty():  # the client may have left while the stream opened
                self._on_receive(inbox.get_nowait())
        else:
            self._receiving = asyncio.get_running_loop().create_task(self._watch())

    def _on_receive(self, message: dict) -> None:
        if message["type"] == "http.disconnect":
            self._leave()

    def abort(self) -> None:
        """Over ASGI the connection is the server's (HTTP/2: shared with other streams): the
        stream is taken as gone, and its coroutine ends as soon as the send it waits in
        returns (the client's window opens, or the connection closes)."""
        self._leave()

    def _leave(self) -> None:
        if not self.left:
            self.left = True
            if self._listener is not None:
                self._listener.poke()

    async def _watch(self) -> None:
        while not self.left:
            self._on_receive(await self._receive())

    def release(self) -> None:
        receiving = self._receiving
        if isinstance(receiving, Inbox):
            receiving.on_put = None
        elif receiving is not None:
            receiving.cancel()
        self._send = self._receive = self._receiving = self._listener = None


class AsgiSink(Connection):
    """A send may wait for as long as the server will not take more: an HTTP/1.1 watcher that
    stopped reading and then sent its FIN (hypercorn's write waits for a drain that never
    comes), an HTTP/2 stream whose client keeps its window shut. When the client leaves
    meanwhile, that send is cancelled, so the stream ends and frees its place whatever the
    server does with a departed stream."""

    __slots__ = ("_pending", "_sending", "_cut")

    def __init__(self, send: Send, receive: Receive):
        super().__init__(send, receive)
        self._pending: bytes | None = None
        self._sending: asyncio.Task | None = None  # the stream's task, while it waits in a send
        self._cut = False  # this sink cancelled that send

    @property
    def blocked(self) -> bool:
        return self._pending is not None

    def write(self, body: bytes) -> bool:
        self._pending = body if self._pending is None else self._pending + body
        return False

    def _leave(self) -> None:
        if not self.left and self._sending is not None:
            self._cut = True
            self._sending.cancel()
        super()._leave()

    async def drain(self) -> None:
        while self._pending is not None and not self.left:
            body, self._pending = self._pending, None
            self._sending = asyncio.current_task()
            try:
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
            except asyncio.CancelledError:
                if not self._cut:
                    raise  # not ours: the worker is stopping
                self._sending.uncancel()
            except Exception:  # the peer went away mid-write
                self._leave()
            finally:
                self._sending = None
        self._pending = None

    async def end(self) -> None:
        await self.drain()  # what the last write left
        await super().end()
