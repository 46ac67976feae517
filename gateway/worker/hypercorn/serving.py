"""hypercorn under uvloop on the inherited listening socket, for HTTP/2, and what of its
internals we use.

Every HTTP/1.1 request is the front's (gateway/worker/http/front.py); hypercorn serves HTTP/2,
handed to it at a connection's first bytes. `prepare` checks the internals this package
follows (patches.py's table) and installs its replacements where they hold. Where the H2
rows moved, the gateway stops offering HTTP/2, with one warning naming the rows: no `h2` in
ALPN, no prior knowledge (a stalled HTTP/2 stream would buffer without bound). `run` is
uvloop with http/accept.py's burst-accepting loop; `serve` is hypercorn's own serve with the
gateway's settings (TLS too: gateway/config/tls.py).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Awaitable, Callable, Coroutine, cast

import uvloop
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from gateway import logs
from gateway.config import tls
from gateway.config.options import Config
from gateway.config.found import effective_listen_backlog
from gateway.tuning import GRACE_SECONDS
from gateway.worker.asgi_sink import sink_for
from gateway.worker.http import accept, front
from gateway.worker.hypercorn import patches

log = logs.get("worker")


def internals_problem() -> str | None:
    """What of the internals this package follows (every row of patches.TABLE) is not where
    the installed code has it; None when all is."""
    return patches.problem(patches.TABLE)


_missing: dict[str, str] = {}  # a guarantee (patches.H2) whose rows moved -> which

# What the gateway stops offering when a guarantee's rows moved, in its warning's words.
WITHOUT = {patches.H2: "h2 not offered: a stalled HTTP/2 stream's memory cannot be bounded here"}


def prepare() -> Callable:
    """Install what the internals allow; the sink factory `(scope, send, receive) -> Sink`
    (gateway/worker/asgi_sink.py's `sink_for`)."""
    # every group checked before any is installed: no check reads code a replacement put there
    problems = {kind: patches.problem(rows) for kind, rows in patches.GUARANTEES.items()}
    for kind, rows in patches.GUARANTEES.items():
        problem = problems[kind]
        if problem is None:
            patches.install(rows)
        else:
            _missing[kind] = problem
            log.warning(WITHOUT[kind], reason=problem)
    return sink_for


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
    # An HTTP/2 connection with no stream open is closed after this.
    hc.keep_alive_timeout = config.header_timeout
    tls.configure(hc, config.certfile, config.keyfile, handshake_timeout=config.header_timeout,
                  h2=patches.H2 not in _missing)
    return hc


def run(main: Coroutine) -> None:
    """Run the worker's `main` under uvloop, on a loop whose TCP servers accept in bursts."""
    uvloop.run(main, loop_factory=accept.Loop)


async def serve(app, config: Config, listener: socket.socket, shutdown: Callable[[], Awaitable],
                busier: Callable[[], bool]) -> None:
    """Serve `app` until `shutdown` returns; `busier` tells the accepting server when this
    worker holds more than its share of streams (http/accept.py)."""
    loop = cast(accept.Loop, asyncio.get_running_loop())  # the worker's loop (process.py)
    loop.busier = busier
    loop.front = front.FrontSettings(app, config, h2=patches.H2 not in _missing)
    try:
        hc = hypercorn_config(listener, config)
        await hypercorn_serve(app, hc, shutdown_trigger=shutdown)
    finally:
        await front.end_apps(front.APPS, GRACE_SECONDS)
