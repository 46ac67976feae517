"""The naive baseline: one process, Starlette + uvicorn, one asyncio.Queue(maxsize=128) a connection.

What a first implementation of the gateway would look like, to measure the gateway against.
A publisher task writes `--rate` load events a second (the same bytes as the gateway's
`--sim-load`, from `loadtest/wire.py`), encodes each once, and puts it into every open
connection's queue; a full queue drops its oldest event (tokio broadcast's rule) and the
connection writes a `lagged` frame before its next event, so the driver's id check holds.
Each connection is a `StreamingResponse` that writes one event per send. A heartbeat is due
every `--heartbeat-interval` from the connection's opening. It answers only
`murmur.WatchSession`, with no replay. For the bench only: uvicorn is not a project dependency.

    python -m loadtest.naive --port 52300 --rate 100 --size 300
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gateway.bench_surface import (SSE_HEARTBEAT, connection_ack_frame, frame_event, lagged_frame,  # noqa: E402
                                    taskless_frame_event)
from loadtest import wire  # noqa: E402

QUEUE_SIZE = 128
HEARTBEAT = object()


class Connection:
    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUE_SIZE)
        self.missed = 0

    def offer(self, item) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.missed += 1
        self.queue.put_nowait(item)


def create_app(rate: float, size: int, heartbeat_interval: float) -> Starlette:
    connections: set[Connection] = set()

    async def publish() -> None:
        loop = asyncio.get_running_loop()
        started, sent = loop.time(), 0
        while True:
            due = int((loop.time() - started) * rate) - sent
            for _ in range(max(0, due)):
                sent += 1
                item = (sent, wire.load_result(size))
                for connection in connections:
                    connection.offer(item)
            await asyncio.sleep(min(0.01, 1.0 / rate))

    def beat(connection: Connection) -> None:
        if connection in connections:
            connection.offer(HEARTBEAT)
            asyncio.get_running_loop().call_later(heartbeat_interval, beat, connection)

    async def stream(connection: Connection, rpc_id_json: bytes):
        ack = taskless_frame_event(connection_ack_frame("stateless"))
        yield frame_event(None, rpc_id_json, orjson.dumps(ack))
        try:
            while True:
                item = await connection.queue.get()
                if item is HEARTBEAT:
                    yield SSE_HEARTBEAT
                    continue
                if connection.missed:
                    lagged = taskless_frame_event(lagged_frame(connection.missed))
                    connection.missed = 0
                    yield frame_event(None, rpc_id_json, orjson.dumps(lagged))
                event_id, result = item
                yield frame_event(event_id, rpc_id_json, result)
        finally:
            connections.discard(connection)

    async def watch(request: Request) -> StreamingResponse:
        rpc_id = orjson.loads(await request.body()).get("id")
        connection = Connection()
        connections.add(connection)
        asyncio.get_running_loop().call_later(heartbeat_interval, beat, connection)
        return StreamingResponse(stream(connection, orjson.dumps(rpc_id)), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        publisher = asyncio.create_task(publish()) if rate > 0 else None
        yield
        if publisher is not None:
            publisher.cancel()

    return Starlette(routes=[Route("/", watch, methods=["POST"])], lifespan=lifespan)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rate", type=float, default=100.0, help="load events a second (0: none)")
    p.add_argument("--size", type=int, default=300, help="load event text size, bytes")
    p.add_argument("--heartbeat-interval", type=float, default=15.0)
    args = p.parse_args(argv)
    app = create_app(args.rate, args.size, args.heartbeat_interval)
    uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", log_level="warning",
                access_log=False, backlog=4096, timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
