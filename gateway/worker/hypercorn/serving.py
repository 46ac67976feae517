"""hypercorn under uvloop on the inherited listening socket, and what of its internals we use.

`prepare` checks the internals this package follows (`internals_problem`): on the pinned
hypercorn it installs lean.py's bookkeeping, http11_fixes.py and h2_backpressure.py, and
answers the sink factory that finds the direct sink; on anything else it patches nothing,
logs one warning, and every stream gets the plain ASGI sink: slower, and without those
fixes, but serving. `run` is uvloop with accept.py's burst-accepting loop; `serve` is
hypercorn's own serve with the gateway's settings (TLS too: gateway/tls.py).
"""

from __future__ import annotations

import asyncio
import socket
from importlib import metadata
from typing import Awaitable, Callable, Coroutine

import uvloop
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from gateway import logs, tls
from gateway.config import Config, effective_listen_backlog
from gateway.worker.hypercorn import accept, h2_backpressure, http11_fixes, lean
from gateway.worker.hypercorn.asgi import AsgiSink
from gateway.worker.hypercorn.direct import sink_for

GRACE_SECONDS = 2.0
HEAD_LINE_FRAMING = 4  # ": " and CRLF around each header line
REQUEST_LINE_EXTRA = 64  # method, version, spaces and the blank line that ends the head

log = logs.get("worker")


def internals_problem() -> str | None:
    """What of hypercorn's (and h11's) internals this package follows is not as it expects;
    None when all is."""
    version = metadata.version("hypercorn")
    if version != lean.HYPERCORN_VERSION:
        return f"hypercorn {version} is not the {lean.HYPERCORN_VERSION} this gateway follows"
    import h11
    from h11 import _writers
    from hypercorn.asyncio import task_group, worker_context
    from hypercorn.protocol import h2, h11 as hc_h11

    expected = [(task_group.TaskGroup, "spawn_app"), (task_group, "_handle"),
                (worker_context.WorkerContext, "event_class"), (_writers, "ChunkedWriter"),
                (worker_context.EventWrapper, "__init__"), (h2.StreamBuffer, "pop"),
                (h2, "BUFFER_LOW_WATER"), *((hc_h11.H11Protocol, name) for name in (
                    "handle", "_send_h11_event", "_maybe_recycle", "_send_error_response",
                    "_close_stream"))]
    missing = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in expected
               if not hasattr(owner, name)]
    if "_writer" not in h11.Connection.__init__.__code__.co_names:
        missing.append("h11.Connection._writer")
    return f"hypercorn internals moved: {', '.join(missing)}" if missing else None


def prepare() -> Callable:
    """Install what the internals allow; the sink factory `(send, receive) -> Sink`."""
    problem = internals_problem()
    if problem is not None:
        log.warning("streams use plain ASGI sends", reason=problem)
        return AsgiSink
    lean.install()
    http11_fixes.install()
    h2_backpressure.install()
    return sink_for


def hypercorn_config(listener: socket.socket, config: Config) -> HypercornConfig:
    hc = HypercornConfig()
    hc.bind = [f"fd://{listener.fileno()}"]
    hc.include_server_header = False
    hc.include_date_header = False
    hc.graceful_timeout = GRACE_SECONDS
    hc.accesslog = None
    hc.errorlog = None
    # The worker's server listens again on the inherited socket with this value (accept.py),
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
    hc.h11_max_incomplete_size = (config.max_header_bytes + REQUEST_LINE_EXTRA
                                  + HEAD_LINE_FRAMING * (config.max_headers + 1))
    tls.configure(hc, config.certfile, config.keyfile, handshake_timeout=config.header_timeout)
    return hc


def run(main: Coroutine) -> None:
    """Run the worker's `main` under uvloop, on a loop whose TCP servers accept in bursts."""
    uvloop.run(main, loop_factory=accept.Loop)


async def serve(app, config: Config, listener: socket.socket, shutdown: Callable[[], Awaitable],
                busier: Callable[[], bool]) -> None:
    """Serve `app` until `shutdown` returns; `busier` tells the accepting server when this
    worker holds more than its share of streams (accept.py)."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, accept.Loop):
        loop.busier = busier
    await hypercorn_serve(app, hypercorn_config(listener, config), shutdown_trigger=shutdown)
