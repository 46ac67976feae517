"""Back-pressure for HTTP/2 streams: a reader that stops reading must stop its stream's sends.

hypercorn 0.18.0 buffers each HTTP/2 stream's body in a `StreamBuffer` whose `push` waits once
the buffer holds two frames (32 KiB), until `pop` releases it. But `pop` releases it whenever
the piece it took is short, and the sending loop pops zero bytes each time a push wakes it
while the peer's flow-control window is shut. So a client that stops reading one stream (or
opens it with a zero window) never makes `push` wait: its body piles up in the worker's memory
without bound, and the stream never falls behind, so it never lags (gateway/worker/stream.py,
"A client that stops reading ...").

Here `pop` releases the pusher only when what is left is under the low-water mark: a stream
whose window is shut holds at most about 32 KiB plus one send, its ASGI send waits, its cursor
stays behind and it lags exactly as an HTTP/1.1 stream with a full socket buffer does
(tests/test_http2.py). A row of the adapter's patch table (patches.py), installed only on the
pinned hypercorn.
"""

from __future__ import annotations

from hypercorn.protocol import h2 as hc_h2


async def pop(self: hc_h2.StreamBuffer, max_length: int) -> bytes:
    """`StreamBuffer.pop`, releasing a waiting `push` only once the buffer is nearly drained."""
    length = min(len(self.buffer), max_length)
    data = bytes(self.buffer[:length])
    del self.buffer[:length]
    if len(self.buffer) < hc_h2.BUFFER_LOW_WATER:
        await self._paused.set()
    if len(self.buffer) == 0:
        await self._is_empty.set()
    return data

