"""Smaller per-connection bookkeeping for hypercorn's asyncio HTTP/1.1 path.

An idle stream's connection is mostly objects the server keeps for it. Several of them are
empty `collections.deque`s, and an empty deque is not small: it allocates its first block of
64 slots up front, 760 bytes in all. hypercorn makes one `asyncio.Queue` per request (three
deques and an `asyncio.Event` with a fourth) and one `asyncio.Event` per connection (a fifth),
and builds two closures per request for ASGI extensions the app never calls. Here the queue
and the event keep their waiters and items in a list (56 bytes empty; at most
`max_app_queue_size` items) and the two helpers are made once per loop. The connection's
read loop keeps no `wait_for` frame and no copy of the request while a stream is open.

hypercorn is pinned (pyproject.toml): `install` patches only the version whose
`TaskGroup.spawn_app` and `TCPServer._read_data` this module copies, and does nothing on any
other (serving.py then gives every stream the plain ASGI sink).
"""

from __future__ import annotations

import asyncio
import collections
from functools import partial
from importlib import metadata

from ssl import SSLError

from hypercorn.asyncio import task_group as hc_task_group
from hypercorn.asyncio import tcp_server
from hypercorn.asyncio.worker_context import EventWrapper, WorkerContext
from hypercorn.events import Closed, RawData

HYPERCORN_VERSION = "0.18.0"


class Waiters(list):
    """The part of a deque asyncio's queues and events use (append, remove, popleft,
    iteration, len), as a list: an empty one costs 56 bytes, not 760."""

    __slots__ = ()

    def popleft(self):
        return self.pop(0)


class LeanQueue(asyncio.Queue):
    """`asyncio.Queue` (the same methods and semantics) over `Waiters`, and `on_put`: a
    callback told each message the server queues for the app, so a stream learns of
    `http.disconnect` without a task of its own waiting on `receive`."""

    on_put = None

    def put_nowait(self, item) -> None:  # `put` ends here too
        super().put_nowait(item)
        if self.on_put is not None:
            self.on_put(item)

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


async def spawn_app(self, app, config, scope, send):
    """hypercorn 0.18.0's `TaskGroup.spawn_app` with a `LeanQueue` and shared helpers."""
    app_queue = LeanQueue(config.max_app_queue_size)
    sync_spawn, call_soon = _loop_helpers(self._loop)
    self.spawn(hc_task_group._handle, app, config, scope, app_queue.get, send, sync_spawn, call_soon)
    return app_queue.put


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


def install() -> bool:
    """Patch hypercorn (this process only); False, patching nothing, on another version."""
    if metadata.version("hypercorn") != HYPERCORN_VERSION:
        return False
    hc_task_group.TaskGroup.spawn_app = spawn_app
    tcp_server.TCPServer._read_data = read_data
    WorkerContext.event_class = LeanEventWrapper
    return True
