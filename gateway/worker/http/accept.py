"""Accepting connections in bursts, not one per event-loop iteration.

libuv (under uvloop) accepts one connection per loop iteration for each listening handle
(libuv/libuv#3696, "unix: don't accept() connections in a loop"; uvloop 0.23 bundles libuv
1.52.1). A worker serving thousands of streams takes tens to hundreds of milliseconds per
iteration, so in a reconnect storm two workers together accepted about 28 connections a second
while the kernel's accept queue held thousands, and the rest timed out in the queue
(loadtest/RESULTS.md, "Reconnect storm"; `strace -c` on a worker: one accept4 per epoll_pwait).

`Loop` is uvloop's loop with one change: a plain TCP server on a given socket (what hypercorn
asks for on the inherited listening socket) is a `BurstServer`, which watches the socket
itself and, each time it is readable, accepts up to ACCEPT_BURST connections, stopping at the
first EAGAIN. Each connection is handed over with `connect_accepted_socket`: the same uvloop
TCP transport (TCP_NODELAY included) libuv's server would have made, its protocol the front
(gateway/worker/http/front.py), which serves every HTTP/1.1 request and hands HTTP/2 to the
protocol hypercorn asked for. On a TLS door each connection's first byte is looked at before the handshake
(plain_http.py: plain HTTP is answered 400, not dropped). Both workers still wait on the one shared accept
queue, so a stopped worker's share is taken by the others (tests/e2e/test_faults.py).

Balance: every worker idle in epoll is woken for a new connection and the first to run takes
it, so on an idle gateway one worker could take every stream (measured: 30 of 30). A worker
holding more than its share of streams (`busier`: the worker's policy, process.py, from the
shared metric blocks) steps back from one readable event for DEFER_SECONDS; if the connection
is still queued then (the sibling is stopped or busy), it accepts it after all.
"""

from __future__ import annotations

import asyncio
import asyncio.constants
import errno
import socket
from typing import Callable

import uvloop

from gateway import logs
from gateway.tuning import ACCEPT_BURST, DEFER_SECONDS, RETRY_SECONDS
from gateway.worker.http.front import Front, FrontSettings
from gateway.worker.http import plain_http

RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

log = logs.get("worker")


class BurstServer:
    """Serves `protocol_factory` on a listening socket; what hypercorn needs of a server
    (`close`, `wait_closed`) and a little of asyncio.Server's surface."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol_factory, sock: socket.socket, backlog: int,
                 busier=None, tls: dict | None = None, front: FrontSettings | None = None):
        self._loop, self._factory = loop, protocol_factory
        self._sock: socket.socket | None = sock  # None once closed
        # Each connection starts with the worker's own front (gateway/worker/http/front.py),
        # which hands it to hypercorn's protocol only for HTTP/2
        self._protocol = protocol_factory if front is None else (lambda: Front(protocol_factory, front))
        self._tls = tls or {}  # ssl and ssl_handshake_timeout: each accepted socket is wrapped (gateway/config/tls.py)
        self._fd = sock.fileno()
        # What each accepted socket is made as, read once as plain ints: socket.accept() reads
        # the listener's family and type through their IntEnum properties for every connection
        # (7% of a worker's CPU in a reconnect storm, py-spy); `_accept` is the call beneath it.
        self._kind = (int(sock.family), int(sock.type), sock.proto)
        self._retry: asyncio.TimerHandle | None = None
        self._serving = False
        self._busier = busier  # () -> bool: this worker holds more than its share
        self._deferred = False
        sock.setblocking(False)
        sock.listen(backlog)
        self._start()

    def _start(self) -> None:
        self._retry = None
        if self._sock is not None and not self._serving:
            self._loop.add_reader(self._fd, self._accept)
            self._serving = True

    def _pause(self) -> None:
        if self._serving:
            self._loop.remove_reader(self._fd)
            self._serving = False

    def _pause_for(self, seconds: float) -> None:
        self._pause()
        self._retry = self._loop.call_later(seconds, self._start)

    def _accept(self) -> None:
        if self._busier is not None and not self._deferred and self._busier():
            self._deferred = True
            self._pause_for(DEFER_SECONDS)  # a less loaded sibling, woken by the same event, takes it
            return
        self._deferred = False
        sock = self._sock
        assert sock is not None  # its reader is removed when it closes
        for _ in range(ACCEPT_BURST):
            try:
                fd, _ = sock._accept()  # type: ignore[attr-defined]  # CPython's, not in typeshed
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty (or another worker took the rest)
            except ConnectionAbortedError:
                continue  # reset while it waited in the queue
            except OSError as exc:
                log.warning("accept failed; accepting again shortly", error=str(exc), retry_s=RETRY_SECONDS)
                if exc.errno in RESOURCE_ERRORS:
                    self._pause_for(RETRY_SECONDS)  # level-triggered: without a pause the loop would spin
                return
            conn = socket.socket(*self._kind, fileno=fd)
            conn.setblocking(False)
            self._loop.create_task(self._connect(conn))

    async def _connect(self, conn: socket.socket) -> None:
        try:
            tls = self._tls
            if tls:  # plain HTTP is answered 400 here instead of failing the handshake
                left = await plain_http.tls_time_left(self._loop, conn, tls["ssl_handshake_timeout"]
                                                      or asyncio.constants.SSL_HANDSHAKE_TIMEOUT)
                if left is None:
                    return
                tls = {**tls, "ssl_handshake_timeout": left}
            await self._loop.connect_accepted_socket(self._protocol, conn, **tls)
        except Exception as exc:  # the peer went away before the transport was made
            log.debug("accepted connection dropped", error=str(exc))
            conn.close()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._sock is None else (self._sock,)

    def close(self) -> None:
        """Stop accepting and close this process's copy of the listening socket."""
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def wait_closed(self) -> None:
        return None


class Loop(uvloop.Loop):
    """uvloop, with plain TCP servers on a given socket accepting in bursts (BurstServer).

    Why a loop of our own: hypercorn asks its loop for the server on the inherited socket
    (`create_server` with the protocol factory of its connections), and this is where that
    request is answered. It is the one place that holds hypercorn's factory and every
    accepted socket together, so it is how each connection starts as the front
    (gateway/worker/http/front.py: `front`, set by `serving.serve`) with hypercorn's protocol
    to hand on to, and how the accept queue drains in bursts. `busier`, set there too, is
    handed to the server (balance between workers)."""

    busier: Callable[[], bool] | None = None
    front: FrontSettings | None = None  # FrontSettings: each connection starts with the front (serving.serve)

    async def create_server(self, protocol_factory, host=None, port=None, *, sock=None, backlog=100,
                            ssl=None, ssl_handshake_timeout=None, **kwargs):
        if (sock is None or kwargs or sock.type != socket.SOCK_STREAM
                or sock.family not in (socket.AF_INET, socket.AF_INET6)):
            return await super().create_server(protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl,
                                               ssl_handshake_timeout=ssl_handshake_timeout, **kwargs)
        tls = None if ssl is None else {"ssl": ssl, "ssl_handshake_timeout": ssl_handshake_timeout}
        return BurstServer(self, protocol_factory, sock, backlog, self.busier, tls, self.front)
