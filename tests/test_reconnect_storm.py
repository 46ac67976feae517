"""Reconnect storm, small and fast (issue #10 scenario 5; `loadtest/storm.py` is the full one).

A burst of watchers opens at once, each with its own Last-Event-ID, against a real 2-worker
gateway whose ring holds a finished burst task, so the ring stands still and every replay
has exactly one right answer: every watcher is answered 200 and replays exactly the ids
after its Last-Event-ID, up to the newest, with no gap frame. And the listening socket's
accept queue is --listen-backlog, capped at net.core.somaxconn (by default that cap), so a
storm waits in the queue rather than on SYN retries; and a worker takes that queue in bursts
(gateway/worker/hypercorn/accept.py), not one connection per loop iteration as libuv would.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess

import pytest
import uvloop

from gateway.config import somaxconn
from gateway.worker import process
from gateway.worker.hypercorn import accept
from gateway.protocol.parser import SSEParser
from tests.support import (Http, SSEStream, headers_for, is_terminal_event, rpc, rpc_body,
                           running_gateway, task_id_of, user_message)

BURST_FRAMES = 300  # the burst task's frames; with its statuses and artifact the ring holds < 512
WATCHERS = 300
WATCH = "murmur.WatchSession"


def listen_backlog(port: int) -> int:
    """The accept queue the kernel gives the listening socket (`ss -l`: Send-Q)."""
    out = subprocess.run(["ss", "-Hltn", f"( sport = :{port} )"], capture_output=True, text=True,
                         timeout=10, check=True).stdout.split()
    return int(out[2])


def finished_burst(port: int) -> int:
    """Run a burst task to its end; the newest id (its terminal status), after checking that a
    replay from 0 holds every id from 1 to it."""
    status, _, answer = rpc(port, "SendMessage", user_message(f"/scenario burst n={BURST_FRAMES}"))
    assert status == 200, answer
    task_id = answer["result"]["task"]["id"]
    with SSEStream(port, WATCH, last_event_id="0", timeout=30) as probe:
        assert probe.status == 200
        seen = probe.read_until(lambda e: e.id is not None and task_id_of(e) == task_id and is_terminal_event(e))
    numbered = [event.id for event in seen if event.id is not None]
    assert numbered == list(range(1, numbered[-1] + 1))
    assert numbered[-1] < 512  # nothing evicted: no replay below may start with a gap
    return numbered[-1]


def read_replay(conn: Http, newest: int) -> tuple[list[int], list[str]]:
    """The ids a stream writes up to `newest`, and its unnumbered events' data."""
    parser, ids, unnumbered = SSEParser(), [], []
    while not ids or ids[-1] < newest:
        chunk = conn.read_chunk()
        assert chunk is not None, f"the stream ended after {ids[-1:]}"
        for event in parser.feed(chunk):
            if event.id is not None:
                ids.append(event.id)
            elif event.data is not None:
                unnumbered.append(event.data)
    return ids, unnumbered


def test_a_burst_of_reconnects_is_served_with_exact_replays():
    with running_gateway(workers=2) as gateway:
        if shutil.which("ss"):
            assert listen_backlog(gateway.port) == somaxconn()
        newest = finished_burst(gateway.port)
        resume = [(index * 37) % newest for index in range(WATCHERS)]  # 0 .. newest - 1, varied
        # All connect first (the kernel completes each handshake into the accept queue), then
        # all send their request: the workers find the whole burst waiting.
        conns = [Http(gateway.port, timeout=30) for _ in range(WATCHERS)]
        try:
            for conn, last_event_id in zip(conns, resume):
                conn.send_request("POST", "/", headers_for(last_event_id=str(last_event_id)), rpc_body(WATCH))
            for conn, last_event_id in zip(conns, resume):
                assert conn.read_head() == 200, conn.headers
                ids, unnumbered = read_replay(conn, newest)
                assert ids == list(range(last_event_id + 1, newest + 1)), last_event_id
                assert '"frame":"connection-ack"' in unnumbered[0]
                assert not any('"frame":"gap"' in data or '"frame":"lagged"' in data for data in unnumbered)
        finally:
            for conn in conns:
                conn.close()


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the accept queue")
def test_listen_backlog_is_the_configured_value_never_above_somaxconn():
    with running_gateway("--listen-backlog", "300", workers=2) as gateway:
        assert listen_backlog(gateway.port) == min(300, somaxconn())
    with running_gateway("--listen-backlog", str(somaxconn() + 1000), workers=2) as gateway:
        assert listen_backlog(gateway.port) == somaxconn()
        assert any(rec.get("event", "").startswith("--listen-backlog is above net.core.somaxconn")
                   for rec in gateway.logs())


@pytest.mark.skipif(somaxconn() < accept.ACCEPT_BURST + 72, reason="the accept queue must hold the whole burst")
def test_a_worker_accepts_a_queued_storm_in_bursts_not_one_at_a_time():
    """One readable event of the listening socket accepts ACCEPT_BURST connections (libuv's
    own server accepts one per loop iteration), the next takes the rest."""
    extra = 72

    async def main() -> list[int]:
        made: list[asyncio.Transport] = []

        class Counting(asyncio.Protocol):
            def connection_made(self, transport) -> None:
                made.append(transport)

        async def settle(count: int) -> None:
            for _ in range(10_000):  # bounded: loop iterations, not seconds
                if len(made) >= count:
                    return
                await asyncio.sleep(0)

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        server = await asyncio.get_running_loop().create_server(Counting, sock=listener, backlog=512)
        assert isinstance(server, accept.BurstServer)
        server._pause()  # the test says when the socket is read
        clients = [socket.create_connection(listener.getsockname()) for _ in range(accept.ACCEPT_BURST + extra)]
        try:
            counts = []
            for expected in (accept.ACCEPT_BURST, accept.ACCEPT_BURST + extra):
                server._accept()
                await settle(expected)  # the connections one call accepted, made (never more)
                counts.append(len(made))
            return counts
        finally:
            server.close()
            for transport in made:
                transport.close()
            for client in clients:
                client.close()

    assert uvloop.run(main(), loop_factory=accept.Loop) == [accept.ACCEPT_BURST, accept.ACCEPT_BURST + extra]


def test_an_idle_gateways_streams_spread_over_its_workers(tmp_path):
    """Every idle worker is woken for a new connection and the first to run takes it; a worker
    holding more than BALANCE_SLACK streams beyond a sibling steps back (accept.py)."""
    with running_gateway(workers=2, tmp_path=tmp_path) as gw:
        streams = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(30)]
        try:
            served = [s.worker_pid for s in streams]
        finally:
            for stream in streams:
                stream.close()
    counts = sorted(served.count(pid) for pid in set(served))
    assert len(counts) == 2 and counts[0] >= 15 - process.BALANCE_SLACK - 2, counts
