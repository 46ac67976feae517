"""The worker's server: its own accept loop on the inherited listening socket, every
connection started as the front, HTTP/2 handed to hypercorn, and the stop.

The supervisor binds and listens once (gateway/supervisor/); each worker listens again on
its copy with the resolved backlog (the last listen() sets the accept queue) and accepts in
bursts (gateway/worker/http/accept.py). Each connection's protocol is the front
(gateway/worker/http/front.py); an HTTP/2 connection (its preface first, or ALPN `h2` on a
TLS door) is handed on to hypercorn (gateway/worker/hypercorn/serving.py), which serves it
and nothing else. On a TLS door the server wraps each accepted socket in the serving context
(gateway/config/tls.py, which a SIGHUP reloads in place).

The stop, in hypercorn's order: accepting stops (this process's copy of the listening socket
closed; the siblings still accept), hypercorn's HTTP/2 connections are told and given
GRACE_SECONDS, then the front's app runs still going and the openings waiting for the pace
get theirs (runs.end_apps: an opening whose turn comes then opens into a closing hub, which
ends it at once). An open stream has no run: the worker's SIGTERM ends every stream through
the hub first (process.py).
"""

from __future__ import annotations

import asyncio
import socket
from functools import partial
from typing import Awaitable, Callable

from gateway.config.found import effective_listen_backlog
from gateway.config.options import Config
from gateway.tuning import GRACE_SECONDS
from gateway.worker.balance import Balance
from gateway.worker.http import front, runs
from gateway.worker.http.accept import BurstServer
from gateway.worker.hypercorn.serving import H2, hypercorn_config, offers_h2, tls_context


async def serve(app, config: Config, listener: socket.socket, shutdown: Callable[[], Awaitable],
                balance: Balance) -> None:
    """Serve `app` on `listener` until `shutdown` returns; `balance` tells the accept loop how
    many connections to take at each readable event (gateway/worker/balance.py)."""
    loop = asyncio.get_running_loop()
    hc = hypercorn_config(config)
    h2 = H2(app, hc, app.counters)
    settings = runs.FrontSettings(app, config, h2=offers_h2())
    server = BurstServer(loop, listener, effective_listen_backlog(config.listen_backlog),
                         partial(front.Front, h2.protocol, settings), balance,
                         tls_context(hc), hc.ssl_handshake_timeout)
    try:
        await shutdown()
    finally:
        server.close()
        await h2.close()
        await runs.end_apps(runs.APPS, app.rpc.openings.pace, GRACE_SECONDS)
