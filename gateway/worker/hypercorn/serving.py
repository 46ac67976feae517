"""hypercorn for HTTP/2 only, one connection at a time, and what of its internals we use.

The worker's own server (gateway/worker/server.py) owns the listening socket, TLS and
shutdown; every connection starts as the front (gateway/worker/http/front.py), which serves
every HTTP/1.1 request and hands an HTTP/2 connection (its preface first, or ALPN `h2`) to
`H2.protocol`: one of hypercorn's `TCPServer`s on that connection, as hypercorn's own server
callback makes them, and nothing else of hypercorn's server (no bind, no lifespan, no
accept). `prepare` checks the internals this package follows (patches.py's table) and
installs its replacements where they hold. Where the H2 rows moved, the gateway stops
offering HTTP/2, with one warning naming the rows: no `h2` in ALPN, no prior knowledge (a
stalled HTTP/2 stream would buffer without bound).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Callable

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config as HypercornConfig
from hypercorn.utils import wrap_app

from gateway import logs
from gateway.common.metrics import Counters
from gateway.config import tls
from gateway.config.options import Config
from gateway.tuning import GRACE_SECONDS
from gateway.worker.asgi_sink import sink_for
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


def offers_h2() -> bool:
    """HTTP/2's guarantee holds on this hypercorn (`prepare` found its rows)."""
    return patches.H2 not in _missing


def hypercorn_config(config: Config) -> HypercornConfig:
    """hypercorn's settings for the HTTP/2 connections it is handed, and the TLS context the
    worker's server wraps every accepted socket in (`tls_context`)."""
    hc = HypercornConfig()
    hc.include_server_header = False
    hc.include_date_header = False
    hc.graceful_timeout = GRACE_SECONDS
    hc.accesslog = None
    hc.errorlog = None
    # An HTTP/2 connection with no stream open is closed after this.
    hc.keep_alive_timeout = config.header_timeout
    tls.configure(hc, config.certfile, config.keyfile, handshake_timeout=config.header_timeout, h2=offers_h2())
    return hc


def tls_context(hc: HypercornConfig) -> ssl.SSLContext | None:
    """The serving context (gateway/config/tls.py keeps it for SIGHUP's reload), or None on a plain door."""
    return hc.create_ssl_context() if hc.ssl_enabled else None


class H2Context(WorkerContext):
    """hypercorn's per-worker context (its `terminated` event tells its connections the server
    stops), holding the worker's counters for h2_idle.py's idle gauge."""

    def __init__(self, counters: Counters | None) -> None:
        super().__init__(None)  # no --max-requests: a worker is not recycled by request count
        self.counters = counters


class H2:
    """Hands single HTTP/2 connections to hypercorn: `protocol` is what the front hands a
    connection on to (asyncio's stream protocol, whose callback runs hypercorn's TCPServer on
    it, as hypercorn's own server callback does); `close` is hypercorn's graceful stop of them."""

    def __init__(self, app, hc: HypercornConfig, counters: Counters | None) -> None:
        self.app = wrap_app(app, hc.wsgi_max_body_size, "asgi")
        self.hc = hc
        self.context = H2Context(counters)
        self.tasks: set[asyncio.Task] = set()  # each connection's TCPServer run

    def protocol(self) -> asyncio.StreamReaderProtocol:
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # asyncio runs the stream callback in a task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        loop = asyncio.get_running_loop()
        await TCPServer(self.app, loop, self.hc, self.context, {}, reader, writer)

    async def close(self) -> None:
        """As hypercorn's serve ends: its connections told (idle ones close, GOAWAY), given
        graceful_timeout to end, and what is left cancelled."""
        await self.context.terminated.set()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=self.hc.graceful_timeout)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks))
