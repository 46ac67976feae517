"""hypercorn under uvloop on the inherited listening socket, and what of its internals we use.

`prepare` checks the internals this package follows (patches.py's table), each guarantee
group on its own, and installs every group that holds. Where a guarantee's rows moved, the
gateway stops offering what it could not bound, with one warning naming the rows: no `h2` in
ALPN (a stalled HTTP/2 stream would buffer without bound), and no keep-alive inside
hypercorn (each answer closes its connection, so every request, a stream's included, is read
by the front of HTTP/1.1 connections rather than left to h11 unpatched). A stream's sink is
the front where it serves the stream, and the plain ASGI sink (asgi.py) wherever hypercorn
does. `run` is uvloop with http/accept.py's burst-accepting loop; `serve` is hypercorn's own serve
with the gateway's settings (TLS too: gateway/tls.py).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Awaitable, Callable, Coroutine

import uvloop
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from gateway import logs, tls
from gateway.config import Config, effective_listen_backlog
from gateway.worker.http import accept, front
from gateway.worker.hypercorn import patches
from gateway.worker.hypercorn.asgi import AsgiSink, Receive, Send

GRACE_SECONDS = 2.0
HEAD_LINE_FRAMING = 4  # ": " and CRLF around each header line
REQUEST_LINE_EXTRA = 64  # method, version, spaces and the blank line that ends the head

log = logs.get("worker")


def internals_problem() -> str | None:
    """What of the internals this package follows (every row of patches.TABLE) is not where
    the installed code has it; None when all is."""
    return patches.problem(patches.TABLE)


_missing: dict[str, str] = {}  # a guarantee (patches.HTTP11, H2) whose rows moved -> which

# What the gateway stops offering when a guarantee's rows moved, in its warning's words.
WITHOUT = {patches.H2: "h2 not offered: a stalled HTTP/2 stream's memory cannot be bounded here",
           patches.HTTP11: "keep-alive off: each answer closes its connection, hypercorn's HTTP/1.1 fixes do not apply"}


def prepare() -> Callable:
    """Install what the internals allow; the sink factory `(send, receive) -> Sink` (`sink_for`)."""
    # every group checked before any is installed: no check reads code a replacement put there
    problems = {kind: patches.problem(rows) for kind, rows in patches.GUARANTEES.items()}
    for kind, rows in patches.GUARANTEES.items():
        if problems[kind] is None:
            patches.install(rows)
        else:
            _missing[kind] = problems[kind]
            log.warning(WITHOUT[kind], reason=problems[kind])
    return sink_for


def sink_for(send: Send, receive: Receive):
    """A stream's sink: the front, where it serves the stream (its send is the front's own:
    gateway/worker/http/front.py); the plain ASGI sink wherever hypercorn serves it."""
    front_of_stream = getattr(send, "__self__", None)
    if isinstance(front_of_stream, front.Front):
        return front_of_stream
    return AsgiSink(send, receive)


def hypercorn_config(listener: socket.socket, config: Config) -> HypercornConfig:
    hc = HypercornConfig()
    hc.bind = [f"fd://{listener.fileno()}"]
    hc.include_server_header = False
    hc.include_date_header = False
    hc.graceful_timeout = GRACE_SECONDS
    hc.accesslog = None
    hc.errorlog = None
    # The worker's server listens again on the inherited socket with this value (http/accept.py),
    # and the last listen() on a socket sets its accept queue: every worker asks for what the
    # supervisor resolved (--listen-backlog, capped at net.core.somaxconn).
    hc.backlog = effective_listen_backlog(config.listen_backlog)
    # hypercorn's idle timer runs from the connection's start (and from the end of each
    # response) until a whole request head has arrived: slow headers and idle keep-alive
    # connections are closed after it.
    hc.keep_alive_timeout = config.header_timeout
    # What h11 buffers of an unfinished head. The app checks the finished head exactly
    # (door.Admission, 431 with problem details); this cap, the limit plus each line's framing,
    # only bounds the memory a head that never finishes can take (431, closed: http11_fixes.py).
    hc.h11_max_incomplete_size = incomplete_head_cap(config)
    # read by http11_fixes.check_protocol: off, Upgrade: h2c is ignored; never an upgrade to an
    # HTTP/2 whose guarantee does not hold here
    hc.h2c_upgrade = config.h2c_upgrade and patches.H2 not in _missing
    if patches.HTTP11 in _missing:
        hc.keep_alive_max_requests = 1  # a public setting: no h11 connection serves a second request
    tls.configure(hc, config.certfile, config.keyfile, handshake_timeout=config.header_timeout,
                  h2=patches.H2 not in _missing)
    return hc


def incomplete_head_cap(config: Config) -> int:
    """The bytes of an unfinished head a connection may buffer: the limit plus each line's framing."""
    return config.max_header_bytes + REQUEST_LINE_EXTRA + HEAD_LINE_FRAMING * (config.max_headers + 1)


def run(main: Coroutine) -> None:
    """Run the worker's `main` under uvloop, on a loop whose TCP servers accept in bursts."""
    uvloop.run(main, loop_factory=accept.Loop)


async def serve(app, config: Config, listener: socket.socket, shutdown: Callable[[], Awaitable],
                busier: Callable[[], bool]) -> None:
    """Serve `app` until `shutdown` returns; `busier` tells the accepting server when this
    worker holds more than its share of streams (http/accept.py)."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, accept.Loop):
        loop.busier = busier
        if front.enabled():
            loop.front = front.FrontSettings(app, config, incomplete_head_cap(config), h2=patches.H2 not in _missing)
    try:
        hc = hypercorn_config(listener, config)
        hc.counters = app.counters  # read by http11_fixes.send_error_response: hypercorn's refusals count
        await hypercorn_serve(app, hc, shutdown_trigger=shutdown)
    finally:
        await front.end_apps(front.APPS, GRACE_SECONDS)
