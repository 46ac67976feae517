"""Reconnect storm, small and fast (issue #10 scenario 5; `loadtest/storm.py` is the full one).

A burst of watchers opens at once, each with its own Last-Event-ID, against a real 2-worker
gateway whose ring holds a finished burst task, so the ring stands still and every replay
has exactly one right answer: every watcher is answered 200 and replays exactly the ids
after its Last-Event-ID, up to the newest, with no gap frame. And the listening socket's
accept queue is --listen-backlog, capped at net.core.somaxconn (by default that cap), so a
storm waits in the queue rather than on SYN retries; and a worker takes that queue in bursts
(gateway/worker/http/accept.py), not one connection per loop iteration as libuv would.

Against a full ring (a 700-frame burst: the buffer has evicted its oldest), a storm of
watchers with Last-Event-ID: 0 each gets the gap frame and exactly the buffer, with the
stall watchdog set tight, and no worker is replaced: the replays are written a bounded piece
at a time (gateway/worker/delivery/catchup.py), so the loop keeps turning. A reader too slow to take
its replay before the ring overwrites it still gets the whole replay; of the live events after
it, it loses only the oldest beyond the queue of 128, told by a `lagged` frame
(tests/e2e/test_replay_under_load.py has the exact counts).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import urllib.request

import pytest
import uvloop

from gateway import tuning
from gateway.config.found import somaxconn
from gateway.protocol.lag import LAG_LIMIT
from gateway.worker.http import accept
from helpers.gateway_harness import running_gateway, wait_for
from helpers.http_client import Http, headers_for, rpc, rpc_body, user_message
from helpers.sse_reading import (SSEStream, STORM_WATCHERS, TERMINAL_STATES, frame_of, full_ring, is_terminal_event,
                                 read_replay, task_id_of)

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
    replay from 0 holds every id from 1 to it. The replay is read once the task has ended (its
    state, asked with GetTask), so the ring stands still: a reader that opened during the burst
    and fell 128 behind its live events would rightly be told `lagged` and miss some."""
    status, _, answer = rpc(port, "SendMessage", user_message(f"/scenario burst n={BURST_FRAMES}"))
    assert status == 200, answer
    task_id = answer["result"]["task"]["id"]
    wait_for(lambda: rpc(port, "GetTask", {"id": task_id})[2]["result"]["status"]["state"] in TERMINAL_STATES,
             timeout=30, what="the burst task's end")
    with SSEStream(port, WATCH, last_event_id="0", timeout=30) as probe:
        assert probe.status == 200
        seen = probe.read_until(lambda e: e.id is not None and task_id_of(e) == task_id and is_terminal_event(e))
    numbered = [event.id for event in seen if event.id is not None]
    assert numbered == list(range(1, numbered[-1] + 1))
    assert numbered[-1] < 512  # nothing evicted: no replay below may start with a gap
    return numbered[-1]


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



def test_a_storm_of_full_replays_is_exact_and_replaces_no_worker(tmp_path):
    with running_gateway("--worker-stall-timeout", "2", workers=2, metrics=True, tmp_path=tmp_path) as gateway:
        workers = wait_for(lambda: len(gateway.worker_pids()) == 2 and gateway.worker_pids(), what="workers")
        newest = full_ring(gateway.port)
        oldest = newest - 511  # the buffer holds the newest 512
        conns = [Http(gateway.port, timeout=60) for _ in range(STORM_WATCHERS)]
        try:
            for conn in conns:
                conn.send_request("POST", "/", headers_for(last_event_id="0"), rpc_body(WATCH))
            for conn in conns:
                assert conn.read_head() == 200, conn.headers
                ids, unnumbered = read_replay(conn, newest)
                assert ids == list(range(oldest, newest + 1))  # each once, in order, none lost
                frames = [frame_of(data) for data in unnumbered]
                assert frames[0]["frame"] == "connection-ack"
                assert frames[1:] == [{"frame": "gap", "firstAvailableId": oldest}]
        finally:
            for conn in conns:
                conn.close()
        assert gateway.worker_pids() == workers  # busy, never replaced
        assert not [rec for rec in gateway.logs() if rec.get("event", "").startswith("worker's event loop stood still")]
        # Each worker measured its loop's stalls meanwhile (its pulse's lateness), for the benchmark.
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/metrics", timeout=10).read().decode()
        assert float(re.search(r"^murgw_loop_stall_seconds_count (\S+)$", metrics, re.M).group(1)) > 0


def test_a_reader_too_slow_for_its_replay_gets_it_whole_and_is_told_what_live_events_it_lost(tmp_path):
    with running_gateway(workers=1, tmp_path=tmp_path) as gateway:
        first_newest = full_ring(gateway.port)
        oldest = first_newest - 511
        slow = Http(gateway.port, rcvbuf=4096, timeout=60)
        try:
            slow.send_request("POST", "/", headers_for(last_event_id="0"), rpc_body(WATCH))
            assert slow.read_head() == 200
            # Not read meanwhile: its replay waits in the gateway while a longer burst
            # overwrites the ring under it.
            newest = full_ring(gateway.port, frames=3000)
            ids, unnumbered = read_replay(slow, newest)
        finally:
            slow.close()
    lost = [frame_of(data)["missed"] for data in unnumbered if frame_of(data)["frame"] == "lagged"]
    assert ids == [*range(oldest, first_newest + 1), *range(newest - LAG_LIMIT + 1, newest + 1)]
    assert lost == [newest - LAG_LIMIT - first_newest]  # only live events, told once


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the accept queue")
def test_listen_backlog_is_the_configured_value_never_above_somaxconn():
    """[claim: listen-backlog]"""
    with running_gateway("--listen-backlog", "300", workers=2) as gateway:
        assert listen_backlog(gateway.port) == min(300, somaxconn())
    with running_gateway("--listen-backlog", str(somaxconn() + 1000), workers=2) as gateway:
        assert listen_backlog(gateway.port) == somaxconn()
        assert any(rec.get("event", "").startswith("--listen-backlog is above net.core.somaxconn")
                   for rec in gateway.logs())


@pytest.mark.skipif(somaxconn() < tuning.ACCEPT_BURST + 72, reason="the accept queue must hold the whole burst")
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
        server = accept.BurstServer(asyncio.get_running_loop(), listener, 512, Counting)
        server._pause()  # the test says when the socket is read
        clients = [socket.create_connection(listener.getsockname()) for _ in range(tuning.ACCEPT_BURST + extra)]
        try:
            counts = []
            for expected in (tuning.ACCEPT_BURST, tuning.ACCEPT_BURST + extra):
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

    assert uvloop.run(main()) == [tuning.ACCEPT_BURST, tuning.ACCEPT_BURST + extra]


def test_an_idle_gateways_streams_spread_over_its_workers(tmp_path):
    """Every idle worker is woken for a new connection and the first to run takes it; a worker
    holding more than BALANCE_SLACK streams beyond a sibling steps back (accept.py). (Every
    worker is serving first: running_gateway waits for it.)"""
    with running_gateway(workers=2, tmp_path=tmp_path) as gw:
        streams = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(30)]
        try:
            served = [s.worker_pid for s in streams]
        finally:
            for stream in streams:
                stream.close()
    counts = sorted(served.count(pid) for pid in set(served))
    assert len(counts) == 2 and counts[0] >= 15 - tuning.BALANCE_SLACK - 2, counts
