"""gateway/worker/asgi_sink.py in-process, with a plain ASGI `send` and `receive` of its own: the
sink answers blocked from a write until its send returned, then pokes its stream (as the front
does when its transport drained); its end is sent after what waits; a client that leaves while
a send waits has that send cancelled and its stream poked; a request cancelled under it (the
worker stopping) leaves its stream to end as a departed client's."""

from __future__ import annotations

import asyncio

import pytest

from gateway.worker.asgi_sink import AsgiSink
from helpers.loop_turns import until

pytestmark = pytest.mark.unit


class Stream:
    """The sink's listener: counts its pokes."""

    def __init__(self):
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1


class Client:
    """An ASGI server's side: each send waits until `let_through`, and `receive` answers
    `http.disconnect` once the client `leaves`."""

    def __init__(self):
        self.sent: list[dict] = []
        self.open = asyncio.Event()
        self.gone = asyncio.Event()

    async def send(self, message: dict) -> None:
        await self.open.wait()
        self.sent.append(message)

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def bodies(self) -> list[tuple[bytes, bool]]:
        return [(message["body"], message["more_body"]) for message in self.sent]


def served(scenario):
    async def main():
        client, stream = Client(), Stream()
        sink = AsgiSink(client.send, client.receive)
        sink.on_disconnect(stream)
        carrying = asyncio.create_task(sink.carry())
        try:
            await scenario(client, stream, sink, carrying)
        finally:
            sink.release()
            carrying.cancel()
    asyncio.run(main())


def test_a_write_blocks_until_its_send_returned_then_the_stream_is_poked():
    async def scenario(client, stream, sink, carrying):
        assert sink.write(b"a") is False and sink.blocked
        for _ in range(5):
            await asyncio.sleep(0)
        assert sink.blocked and client.sent == [] and stream.pokes == 0  # its send waits: still blocked
        client.open.set()
        await until(lambda: stream.pokes == 1)
        assert not sink.blocked and client.bodies() == [(b"a", True)]
    served(scenario)


def test_the_end_is_sent_after_what_waits_and_the_request_returns():
    async def scenario(client, stream, sink, carrying):
        client.open.set()
        sink.write(b"a")
        sink.end_now()
        sink.release()  # the hub lets the stream go at once; its end still leaves
        await asyncio.wait_for(carrying, 5)
        assert client.bodies() == [(b"a", True), (b"", False)] and not sink.closed
    served(scenario)


def test_a_client_that_leaves_while_a_send_waits_has_it_cancelled_and_its_stream_poked():
    async def scenario(client, stream, sink, carrying):
        sink.write(b"a")
        await until(lambda: sink.blocked and not client.sent)
        client.gone.set()  # the reset: the send never returns of itself
        await asyncio.wait_for(carrying, 5)
        assert sink.closed and stream.pokes == 1 and client.sent == []
    served(scenario)


def test_a_request_cancelled_under_its_stream_leaves_it_ended_as_a_departed_clients():
    async def scenario(client, stream, sink, carrying):
        await asyncio.sleep(0)  # one turn: it started, and waits for a body
        assert not carrying.done()
        carrying.cancel()  # the worker stopping
        with pytest.raises(asyncio.CancelledError):
            await carrying
        assert sink.closed and stream.pokes == 1
    served(scenario)
