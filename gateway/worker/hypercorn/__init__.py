"""The worker's server adapter: every line that knows hypercorn is in this package, and
hypercorn serves HTTP/2 only (every HTTP/1.1 request is gateway/worker/http/front.py's).

patches.py is the one table of every replacement of, and every reach into, another library's
internals; serving.py hands single HTTP/2 connections to hypercorn (the worker's own server,
gateway/worker/server.py, owns the socket, TLS and the stop) and checks that table at start,
not offering HTTP/2 where a moved row leaves it unbounded; h2_backpressure.py, h2_limits.py
and h2_idle.py put right what its HTTP/2 path lacks. The rest of the worker sees only `Sink`
(gateway/worker/delivery/sink.py), `prepare` and serving.py's `H2`.
"""

from gateway.worker.hypercorn.serving import prepare

__all__ = ["prepare"]
