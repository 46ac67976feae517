"""Accepting connections in bursts, not one per event-loop iteration.

libuv (under uvloop) accepts one connection per loop iteration for each listening handle
(libuv/libuv#3696, "unix: don't accept() connections in a loop"; uvloop 0.23 bundles libuv
1.52.1). A worker serving thousands of streams takes tens to hundreds of milliseconds per
iteration, so in a reconnect storm two workers together accepted about 28 connections a second
while the kernel's accept queue held thousands, and the rest timed out in the queue
(loadtest/RESULTS.md, "Reconnect storm"; `strace -c` on a worker: one accept4 per epoll_pwait).

`BurstServer` is the worker's server on the inherited listening socket (gateway/worker/server.py
starts it): it watches the socket itself and, each time it is readable, accepts up to
ACCEPT_BURST connections, stopping at the first EAGAIN. Each connection is handed over with
`connect_accepted_socket`: the same uvloop TCP transport libuv's server would have made, its
protocol the front (gateway/worker/http/front.py), which serves every HTTP/1.1 request and
hands HTTP/2 to hypercorn (gateway/worker/hypercorn/serving.py). On a TLS door each
connection's first byte is looked at before the handshake (plain_http.py: plain HTTP is
answered 400, not dropped). Every worker waits on the one shared accept queue, so a stopped
worker's share is taken by the others (tests/e2e/test_faults.py).

System calls: a plain connection is handed to uvloop as its descriptor (`Accepted`), not a
Python socket (CPython checks a descriptor it wraps with a getsockname), nor set non-blocking
here: libuv's `uv_tcp_open` does it (one ioctl, not two). A TLS connection is a socket, set
non-blocking, as plain_http.py reads it first. What is left of an opening's calls is
docs/architecture.md's (the path of one opening, step 1).

Balance: before each readable event the loop asks the worker's balance (gateway/worker/balance.py)
how many connections to take. None: it steps back from the event for DEFER_SECONDS, and a
sibling woken by the same event takes it; once more it asks again (a full worker steps back
for as long as a sibling whose loop turns has room, and accepts to answer 503 once every
sibling with room has been silent SIBLING_SILENT_SECONDS; one merely ahead of its share takes
the connection then). Each connection counts as a place taken from its accept (the balance's
`accepted`, in connections_idle), through a TLS handshake too, so a sibling waiting for this
worker's room sees it go; the front takes that count over when its transport is made
(gateway/worker/http/front.py), and a connection dropped before that gives it back
(`dropped`): counted once all along, never twice nor missing while it is handed over.
"""

from __future__ import annotations

import asyncio
import asyncio.constants
import errno
import os
import socket
import ssl
from typing import Callable

from gateway import logs
from gateway.tuning import ACCEPT_BURST, DEFER_SECONDS, RETRY_SECONDS
from gateway.worker.balance import Balance
from gateway.worker.http import plain_http

RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

log = logs.get("worker")


class Accepted:
    """An accepted plain connection as uvloop's `connect_accepted_socket` reads it: its family,
    type and descriptor. uvloop's transport closes the descriptor and then calls `close`."""

    __slots__ = ("family", "type", "fd")

    def __init__(self, family: int, type_: int, fd: int):
        self.family, self.type, self.fd = family, type_, fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        self.fd = -1  # closed with the transport that took it

    def drop(self) -> None:
        """Close the descriptor no transport took."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class BurstServer:
    """Serves `start` (a connection's protocol: the front) on a listening socket until `close`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, backlog: int,
                 start: Callable[[], asyncio.Protocol], balance: Balance | None = None,
                 tls: ssl.SSLContext | None = None, handshake_timeout: float | None = None):
        self._loop, self._protocol = loop, start
        self._sock: socket.socket | None = sock  # None once closed
        self._tls = tls  # each accepted socket is wrapped in it (gateway/config/tls.py); None: plain
        self._handshake_timeout = handshake_timeout or asyncio.constants.SSL_HANDSHAKE_TIMEOUT
        self._fd = sock.fileno()
        # What each accepted socket is made as, read once as plain ints: socket.accept() reads
        # the listener's family and type through their IntEnum properties for every connection
        # (7% of a worker's CPU in a reconnect storm, py-spy); `_accept` is the call beneath it.
        self._kind = (int(sock.family), int(sock.type), sock.proto)
        self._retry: asyncio.TimerHandle | None = None
        self._serving = False
        self._balance = balance  # how many to accept now (0: none); None: every burst whole
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
        burst, balance = ACCEPT_BURST, self._balance
        if balance is not None:
            burst = balance.burst(self._deferred)
            if not burst:
                self._deferred = True
                self._pause_for(DEFER_SECONDS)  # a sibling with more room, woken by the same event, takes it
                return
        self._deferred = False
        sock = self._sock
        assert sock is not None  # its reader is removed when it closes
        for _ in range(burst):
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
            if balance is not None:
                balance.accepted()
            if self._tls is None:
                self._loop.create_task(self._connect(Accepted(*self._kind[:2], fd)))
            else:
                self._loop.create_task(self._connect_tls(socket.socket(*self._kind, fileno=fd)))

    async def _connect(self, conn: Accepted) -> None:
        try:
            await self._loop.connect_accepted_socket(self._protocol, conn)  # type: ignore[arg-type]  # its fd
        except Exception as exc:  # the peer went away before the transport was made
            log.debug("accepted connection dropped", error=str(exc))
            conn.drop()
            self._dropped()

    async def _connect_tls(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(False)
            # plain HTTP is answered 400 here instead of failing the handshake
            left = await plain_http.tls_time_left(self._loop, conn, self._handshake_timeout)
            if left is None:
                self._dropped()
                return
            await self._loop.connect_accepted_socket(self._protocol, conn, ssl=self._tls,
                                                     ssl_handshake_timeout=left)
        except Exception as exc:  # the peer went away before the handshake was done
            log.debug("accepted connection dropped", error=str(exc))
            conn.close()
            self._dropped()

    def _dropped(self) -> None:
        """No protocol was made for a connection accepted: its place, counted since, is given back."""
        if self._balance is not None:
            self._balance.dropped()

    def close(self) -> None:
        """Stop accepting and close this process's copy of the listening socket."""
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
