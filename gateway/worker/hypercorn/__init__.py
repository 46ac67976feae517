"""The worker's server adapter: every line that knows hypercorn (or its h11) is in this package.

patches.py is the one table of every replacement of, and every reach into, another library's
internals; serving.py runs hypercorn under uvloop (on gateway/worker/http/accept.py's loop,
where each connection starts as the front) and checks that table at start, not offering what
a moved row leaves unbounded; plain_http.py answers plain HTTP on a TLS door; asgi.py is the
sink of a stream hypercorn serves, over plain ASGI sends;
http11_fixes.py, h2_backpressure.py and h2_limits.py put right what its HTTP/1.1 and HTTP/2
paths lack. The rest of the worker sees only `Sink` (gateway/worker/delivery/sink.py) and the three
names below.
"""

from gateway.worker.hypercorn.serving import prepare, run, serve

__all__ = ["prepare", "run", "serve"]
