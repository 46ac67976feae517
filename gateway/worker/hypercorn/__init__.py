"""The worker's server adapter: every line that knows hypercorn (or its h11) is in this package.

patches.py is the one table of every replacement of, and every reach into, another library's
internals; serving.py runs hypercorn under uvloop and checks that table at start, not
offering what a moved row leaves unbounded; accept.py accepts connections in bursts, each
starting as the front of gateway/worker/http/ (and, on a TLS door, answers plain HTTP with
plain_http.py); asgi.py is the sink of a stream hypercorn serves, over plain ASGI sends;
http11_fixes.py, h2_backpressure.py and h2_limits.py put right what its HTTP/1.1 and HTTP/2
paths lack. The rest of the worker sees only `Sink` (gateway/worker/sink.py) and the three
names below.
"""

from gateway.worker.hypercorn.serving import prepare, run, serve

__all__ = ["prepare", "run", "serve"]
