"""The worker's server adapter: every line that knows hypercorn (or its h11) is in this package.

patches.py is the one table of every replacement of, and every reach into, another library's
internals; serving.py runs hypercorn under uvloop and checks that table at start, falling
back to plain ASGI when a row moved; carried.py takes an HTTP/1.1 stream's connection out of
hypercorn once its head is written (the lean stream connection); accept.py accepts connections in bursts (and, on a TLS
door, answers plain HTTP with plain_http.py); direct.py is the sink that writes a stream's
chunks straight to the transport; asgi.py the sink over plain ASGI sends; lean.py slims hypercorn's per-request bookkeeping; http11_fixes.py and
h2_backpressure.py put right what its HTTP/1.1 and HTTP/2 paths lack. The rest of the worker
sees only `Sink` (gateway/worker/sink.py) and the three names below.
"""

from gateway.worker.hypercorn.serving import prepare, run, serve

__all__ = ["prepare", "run", "serve"]
