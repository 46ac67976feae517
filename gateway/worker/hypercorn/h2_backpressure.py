"""Back-pressure for HTTP/2 streams: a reader that stops reading must stop its stream's sends.

hypercorn 0.18.0 buffers each HTTP/2 stream's body in a `StreamBuffer` whose `push` waits once
the buffer holds two frames (32 KiB), until `pop` releases it. But `pop` releases it whenever
the piece it took is short, and the sending loop pops zero bytes each time a push wakes it
while the peer's flow-control window is shut. So a client that stops reading one stream (or
opens it with a zero window) never makes `push` wait: its body piles up in the worker's memory
without bound, and the stream never falls behind, so it never lags (gateway/worker/delivery/stream.py,
"A client that stops reading ...").

Here `pop` releases the pusher only when what is left is under the low-water mark: a stream
whose window is shut holds at most about 32 KiB plus one send, its ASGI send waits, its cursor
stays behind and it lags exactly as an HTTP/1.1 stream with a full socket buffer does
(tests/e2e/test_http2.py). A row of the adapter's patch table (patches.py), installed only on the
pinned hypercorn.

A stream whose client leaves (its `RST_STREAM`, a GOAWAY, the connection's FIN or reset) must
not stay in that wait: hypercorn closes the stream (the app reads `http.disconnect`) but not
its buffer, so a `push` waiting for a window that will never open waited for ever, holding the
stream's coroutine, its place and its buffer. `close_stream` closes the buffer with the stream:
the waiting `push` returns, the next raises inside hypercorn (answered as a closed stream), the
sink sees its client gone, and the sending task drops the buffer (tests/e2e/test_hostile_h2.py).
A connection that close leaves with no stream is idle again (h2_idle.py's `idle_again`).
"""

from __future__ import annotations

from hypercorn.protocol import h2 as hc_h2

from gateway.worker.hypercorn import h2_idle

_original_close_stream = hc_h2.H2Protocol._close_stream


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



async def close_stream(self: hc_h2.H2Protocol, stream_id: int) -> None:
    """`H2Protocol._close_stream`, closing the stream's buffer too: a send waiting there for
    window returns, and the stream is handed to the sending task to be dropped."""
    await _original_close_stream(self, stream_id)
    buffer = self.stream_buffers.get(stream_id)
    if buffer is not None:
        await buffer.close()
        await self._window_updated(stream_id)  # unblocked: the sending task finds it closed
    await h2_idle.idle_again(self)  # the last stream gone, however it went: the idle timer runs
