"""gateway/worker/hypercorn/lean.py: the slimmer per-connection bookkeeping is installed on the pinned
hypercorn, and a stream still learns at once that its client left (through the lean receive
queue, not a task of its own, and not at its next heartbeat), whether it reset the
connection or only sent a FIN."""

from __future__ import annotations

import asyncio

import pytest

from gateway.worker.hypercorn.asgi import Inbox
from gateway_harness import running_gateway, scrape, wait_for
from sse_reading import SSEStream, reset

OPEN = 'murgw_connections_open{endpoint="murmur.WatchSession"}'


def test_the_inbox_is_a_queue_that_tells_of_each_message():
    """asgi.py's `Inbox` over lean.py's `LeanQueue`: a queue's semantics, each put told."""
    async def use() -> list:
        queue, seen = Inbox(2), []
        queue.on_put = seen.append
        await queue.put("a")
        queue.put_nowait("b")
        got = [await queue.get(), queue.get_nowait()]
        waiter = asyncio.ensure_future(queue.get())
        await asyncio.sleep(0)
        queue.put_nowait("c")
        return [got, await waiter, seen, queue.empty()]
    assert asyncio.run(use()) == [["a", "b"], "c", ["a", "b", "c"], True]


@pytest.mark.parametrize("leave", [reset, SSEStream.close], ids=["reset", "fin"])
def test_a_client_that_leaves_is_noticed_before_any_heartbeat(tmp_path, leave):
    """A reset, or a FIN (on a stream, the watcher leaving: http11_fixes.py), is noticed from
    the read side, with nothing written to the client."""
    with running_gateway(metrics=True, heartbeat=300, workers=1, tmp_path=tmp_path) as gw:
        watchers = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(5)]
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 5, what="five open")
        for watcher in watchers:
            leave(watcher)
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="every close noticed")
