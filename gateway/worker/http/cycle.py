"""One request's run of the worker's app on an HTTP/1.1 connection: its ASGI scope, `receive`
(the body as the front reads it, then the client's leaving) and `send` (the answer framed as
h11 frames it: framing.py), as uvicorn's RequestResponseCycle.

The connection's front (front.py) makes one `Cycle` per request and runs the app with it,
one request at a time, in order. A cycle the connection has gone past (its answer is over,
the next request read) writes nothing and hears only `http.disconnect`. An event stream's
answer closes its connection at its end; once the hub takes the front as the stream's sink
(`hand_over`), the hub alone writes its bytes (transport_sink.py), its head with the first.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

from gateway.worker.delivery.sink import SCOPE_EXTENSION
from gateway.worker.http import framing
from gateway.worker.http.head_checks import Parsed

DISCONNECT = {"type": "http.disconnect"}
ASGI = {"spec_version": "2.1", "version": "3.0"}


def peer_of(transport) -> tuple | None:
    """The scope's `client`: the connection's peer (a system call: asked once a request)."""
    peer = transport.get_extra_info("peername")
    return None if not peer else (peer[0], peer[1])


def scope_of(request: Parsed, transport, scheme: str, websocket: bool, client: tuple | None, sink) -> dict:
    """The ASGI scope hypercorn made of the same request (`client`: `peer_of`), with the front
    handed over as its stream's sink (delivery/sink.py's `SCOPE_EXTENSION`)."""
    raw_path, _, query = request.url.partition(b"?")
    own = transport.get_extra_info("sockname")
    scope: dict = {"type": "websocket" if websocket else "http", "http_version": request.version.decode(),
             "asgi": ASGI, "scheme": ("wss" if scheme == "https" else "ws") if websocket else scheme,
             "path": unquote(raw_path.decode("latin-1")), "raw_path": raw_path, "query_string": query,
             "root_path": "", "headers": request.headers,
             "client": client,
             "server": None if not own else (own[0], own[1]), "state": {}, "extensions": {SCOPE_EXTENSION: sink}}
    if websocket:
        scope["subprotocols"] = []
        scope["extensions"] = {"websocket.http.response": {}}
    else:
        scope["method"] = request.method.decode("latin-1")
    return scope


def view_of(request: Parsed, client: tuple | None) -> dict:
    """What the door reads of a `POST /` the front serves at once (front.py): the scope's
    keys it asks for (the request line, the headers, the peer), and none of the rest."""
    return {"type": "http", "method": "POST", "path": "/", "raw_path": b"/", "query_string": b"",
            "headers": request.headers, "client": client}


class Cycle:
    """One request's `receive` and `send`, and what its answer has come to."""

    __slots__ = ("front", "parts", "body_done", "given", "waiter", "head_only", "keep_alive", "http10",
                 "started", "chunked", "unsent", "over", "closes", "streaming", "expects")

    def __init__(self, front, request: Parsed, keep_alive: bool):
        self.front = front
        self.parts: list[bytes] = []  # body bytes read, not yet received by the app
        self.body_done = False  # the whole body is in `parts` (or was received)
        self.given = False  # the app has received the body's end
        self.waiter: asyncio.Future | None = None
        self.head_only = request.method == b"HEAD"
        self.keep_alive = keep_alive
        self.http10 = request.version == b"1.0"
        self.started = self.chunked = self.over = self.closes = self.streaming = False
        self.unsent = b""
        self.expects = False  # the client waits for `100 Continue` before sending its body

    @property
    def current(self) -> bool:
        return self.front.cycle is self

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> dict:
        while True:
            if not self.current or self.front.left:
                return DISCONNECT
            if not self.given and (self.parts or self.body_done):
                body = b"".join(self.parts)
                self.parts.clear()
                self.given = self.body_done
                self.front.body_taken()
                return {"type": "http.request", "body": body, "more_body": not self.given}
            if self.expects:  # the app waits for a body its client waits to be asked for
                self.expects = False
                if not self.started:
                    self.front.transport.write(framing.CONTINUE)
            self.waiter = self.front.settings.loop.create_future()
            await self.waiter

    async def send(self, message: dict) -> None:
        self.put(message)

    def put(self, message: dict) -> None:
        """`send`'s work, which never waits: the front's own openings (front.py) call it as is."""
        front = self.front
        transport = front.transport
        if not self.current or self.over or transport is None or transport.is_closing():
            return
        kind = message["type"].removeprefix("websocket.")
        if kind == "http.response.start":
            headers = message.get("headers", [])
            head = framing.head(message["status"], headers, self.keep_alive, self.http10)
            self.started, self.chunked, self.unsent = True, head.chunked, head.block
            # an event stream's connection ends with it: the hub's stream (`sink`) or its one body
            self.closes = not self.keep_alive or self.http10 or head.closes or head.stream
            return
        body = b"" if self.head_only else message.get("body", b"")
        more = message.get("more_body", False)
        if self.chunked and body:
            body = framing.chunk(body)
        data = self.unsent + body if self.unsent else body
        self.unsent = b""
        if not more and self.chunked and not self.head_only:
            data += framing.LAST_CHUNK
        if data:
            transport.write(data)
        if not more:
            self.over = True
            front.answered(self)

    def hand_over(self) -> None:
        """The hub takes the front as the sink of the stream this answer's head began
        (`Front.on_disconnect`): from here on the hub alone writes its bytes, the head with
        the first of them (transport_sink.py)."""
        self.streaming = True
        if self.started:  # else its connection went before its head: the hub finds the sink closed
            head, self.unsent = self.unsent, b""
            self.front.stream(head, self.chunked)
