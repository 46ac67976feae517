"""Smaller per-connection bookkeeping for hypercorn's asyncio HTTP/1.1 path.

An idle stream's connection is mostly objects the server keeps for it. Several of them are
empty `collections.deque`s, and an empty deque is not small: it allocates its first block of
64 slots up front, 760 bytes in all. hypercorn makes one `asyncio.Queue` per request (three
deques and an `asyncio.Event` with a fourth) and one `asyncio.Event` per connection (a fifth),
and builds two closures per request for ASGI extensions the app never calls. Here the queue
and the event keep their waiters and items in a list (56 bytes empty; at most
`max_app_queue_size` items) and the two helpers are made once per loop. The connection's
read loop keeps no `wait_for` frame and no copy of the request while a stream is open.

These are rows of the adapter's patch table (patches.py), which installs them on the pinned
hypercorn and Python only, whose `TaskGroup.spawn_app`, `TCPServer._read_data` and asyncio
internals this module copies (serving.py otherwise gives every stream the plain ASGI sink).
"""

from __future__ import annotations

import asyncio
import collections
from functools import partial
from ssl import SSLError

from hypercorn.asyncio import task_group as hc_task_group
from hypercorn.asyncio import tcp_server
from hypercorn.asyncio.worker_context import EventWrapper
from hypercorn.events import Closed, RawData


class Waiters(list):
    """The part of a deque asyncio's queues and events use (append, remove, popleft,
    iteration, len), as a list: an empty one costs 56 bytes, not 760."""

    __slots__ = ()

    def popleft(self):
        return self.pop(0)


class LeanQueue(asyncio.Queue):
    """`asyncio.Queue` (the same methods and semantics) over `Waiters`."""

    def _init(self, maxsize: int) -> None:
        # runs last in Queue.__init__: the deques it made there are freed at once
        self._queue = Waiters()
        self._getters = Waiters()
        self._putters = Waiters()
        self._finished._waiters = Waiters()


def slim_stream_protocol(writer: asyncio.StreamWriter) -> None:
    """Swap the empty deque asyncio's stream protocol keeps for `drain` waiters (760 bytes, one
    per connection) for `Waiters`; it only appends, removes and iterates them. And once the
    request is read, let its reader's empty buffer go: a bytearray keeps the capacity the
    request needed for as long as the stream is open."""
    protocol = getattr(writer, "_protocol", None)
    waiters = getattr(protocol, "_drain_waiters", None)
    if type(waiters) is collections.deque and not waiters:
        protocol._drain_waiters = Waiters()
    reader = getattr(protocol, "_stream_reader", None)
    if type(getattr(reader, "_buffer", None)) is bytearray and not reader._buffer:
        reader._buffer = bytearray()


class LeanEventWrapper(EventWrapper):
    def __init__(self) -> None:
        super().__init__()
        self._event._waiters = Waiters()


_helpers: dict[asyncio.AbstractEventLoop, tuple] = {}


def _loop_helpers(loop: asyncio.AbstractEventLoop) -> tuple:
    """hypercorn's `sync_spawn` and `call_soon` for `loop`, made once (they close over the
    loop only)."""
    helpers = _helpers.get(loop)
    if helpers is None:
        def call_soon(func, *args):
            return asyncio.run_coroutine_threadsafe(func(*args), loop).result()

        helpers = _helpers[loop] = (partial(loop.run_in_executor, None), call_soon)
    return helpers


def spawn_app_over(queue_class: type[LeanQueue]):
    """hypercorn 0.18.0's `TaskGroup.spawn_app`, each request's receive queue a `queue_class`
    (asgi.py's, which tells a stream of what it queues), with shared helpers."""
    async def spawn_app(self, app, config, scope, send):
        app_queue = queue_class(config.max_app_queue_size)
        sync_spawn, call_soon = _loop_helpers(self._loop)
        self.spawn(hc_task_group._handle, app, config, scope, app_queue.get, send, sync_spawn, call_soon)
        return app_queue.put
    return spawn_app


async def read_data(self) -> None:
    """hypercorn 0.18.0's `TCPServer._read_data`, with no `wait_for` frame per connection when
    there is no read timeout (the gateway sets none), and not holding the last bytes read (a
    stream's whole request) while it waits for more."""
    timeout = self.config.read_timeout
    while not self.reader.at_eof():
        try:
            if timeout is None:
                data = await self.reader.read(tcp_server.MAX_RECV)
            else:
                data = await asyncio.wait_for(self.reader.read(tcp_server.MAX_RECV), timeout)
        except (ConnectionError, OSError, asyncio.TimeoutError, TimeoutError, SSLError):
            break
        else:
            await self.protocol.handle(RawData(data))
            del data
    await self.protocol.handle(Closed())

