"""gateway/worker/hypercorn/lean.py: the slimmer per-connection bookkeeping is installed on the pinned
hypercorn, and a stream still learns at once that its client left (through the lean receive
queue, not a task of its own, and not at its next heartbeat); a client that only sent a FIN
is noticed at the next write."""

from __future__ import annotations

import asyncio
import socket
import struct

from hypercorn.asyncio import tcp_server

from gateway.worker.hypercorn import lean
from support import SSEStream, rpc, running_gateway, user_message, wait_for
from test_observability import scrape

OPEN = 'murgw_connections_open{endpoint="murmur.WatchSession"}'


def test_installs_on_the_pinned_hypercorn():
    assert lean.install()
    assert tcp_server.TCPServer._read_data is lean.read_data


def test_lean_queue_is_a_queue():
    async def use() -> list:
        queue, seen = lean.LeanQueue(2), []
        queue.on_put = seen.append
        await queue.put("a")
        queue.put_nowait("b")
        got = [await queue.get(), queue.get_nowait()]
        waiter = asyncio.ensure_future(queue.get())
        await asyncio.sleep(0)
        queue.put_nowait("c")
        return [got, await waiter, seen, queue.empty()]
    assert asyncio.run(use()) == [["a", "b"], "c", ["a", "b", "c"], True]


def reset(stream: SSEStream) -> None:
    """Close the connection with a reset (SO_LINGER 0): the client is gone, not half-closed."""
    stream.http.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.http.close()


def test_a_client_that_leaves_is_noticed_before_any_heartbeat(tmp_path):
    with running_gateway(metrics=True, heartbeat=300, workers=1, tmp_path=tmp_path) as gw:
        watchers = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(5)]
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 5, what="five open")
        for watcher in watchers:
            reset(watcher)
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="every close noticed")


def test_a_client_that_closes_is_noticed_at_the_next_write(tmp_path):
    """A FIN alone may be a half-close (the client still reads: http11_fixes.py), so the stream
    goes on; the next bytes written to a client that really left are reset, and it ends."""
    with running_gateway(metrics=True, heartbeat=300, workers=1, tmp_path=tmp_path) as gw:
        watchers = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(5)]
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 5, what="five open")
        for watcher in watchers:
            watcher.http.close()
        rpc(gw.port, "SendMessage", user_message("/scenario burst n=20"))
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="every close noticed")
