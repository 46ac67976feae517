"""Capacity from the machine: the descriptor limit is raised at start and sets the default
connection limit; past it a request is refused with 503 and Retry-After, and counted."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from gateway.config.capacity import connection_limit
from gateway.tuning import FD_RESERVE, MEMORY_SHARE, PLAN_BYTES_PER_WATCHER
from helpers.gateway_harness import GatewayOptions, Tally, running_gateway, scrape, wait_for
from helpers.raw_http import exchange, head, refusal
from helpers.sse_reading import SSEStream, reset

WATCH = "murmur.WatchSession"
OPEN = 'murgw_connections_open{endpoint="murmur.WatchSession"}'
CARD = head("GET", "/.well-known/agent-card.json", [])
SOFT, HARD = 64, FD_RESERVE + 12
CAPACITY_REFUSED = 'murgw_requests_refused_total{reason="capacity"}'


def open_files_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as fh:
        line = next(line for line in fh if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def test_the_descriptor_limit_is_raised_and_sets_the_default_connection_limit(tmp_path):
    with running_gateway(workers=1, metrics=True, nofile=(SOFT, HARD), tmp_path=tmp_path) as gw:
        logged = next(rec for rec in gw.logs() if rec.get("event") == "descriptor limit raised")
        assert (logged["soft_before"], logged["soft"], logged["hard"]) == (SOFT, HARD, HARD)
        banner = next(rec for rec in gw.logs() if rec.get("event") == "listening")
        limit = banner["max_connections_per_worker"]
        assert limit == HARD - FD_RESERVE  # descriptors, not memory, are the bound here
        assert (banner["capacity_bound"], banner["descriptors"]) == ("descriptors", HARD)
        worker = wait_for(lambda: gw.worker_pids().get(0), what="the worker")
        assert open_files_limit(gw.pid) == open_files_limit(worker) == (HARD, HARD)
        streams = []
        try:
            streams = [SSEStream(gw.port, WATCH, {}) for _ in range(limit)]
            assert all(stream.status == 200 for stream in streams)
            refused = scrape(gw.metrics_port)[CAPACITY_REFUSED]
            answer = exchange(gw.port, CARD, method="GET")
            assert refusal(answer, 503) and answer.headers["retry-after"] == "1"
            wait_for(lambda: scrape(gw.metrics_port)[CAPACITY_REFUSED] == refused + 1,
                     what="the refusal counted")
        finally:
            for stream in streams:
                with contextlib.suppress(OSError):
                    stream.close()


def test_the_connection_limit_is_the_smaller_of_descriptors_and_memory():
    watchers_in = lambda n: int(n * PLAN_BYTES_PER_WATCHER / MEMORY_SHARE)  # memory for n watchers
    assert connection_limit(20000, watchers_in(10**6), 2) == (20000 - FD_RESERVE, "descriptors")
    assert connection_limit(10**6, watchers_in(30000), 2) == (15000, "memory")  # split over workers
    assert connection_limit(10**6, 0, 4) == (1, "memory")  # never below one


def half_close(stream: SSEStream) -> None:
    """A FIN, the socket kept: the client could still read, but it has left its stream."""
    stream.http.sock.shutdown(socket.SHUT_WR)


@pytest.fixture(scope="module")
def gateway_options():
    """One worker with three places; heartbeats 300 s apart, so nothing is written to a stream
    whose client left: only its leaving can free its place within a wait's deadline."""
    return GatewayOptions("--max-connections", "3", workers=1, heartbeat=300, metrics=True)


@pytest.mark.parametrize("leave", [half_close, SSEStream.close, reset], ids=["fin", "fin-and-close", "reset"])
def test_a_watcher_that_leaves_frees_its_place_at_once(gateway, leave):
    """[claim: client-leaves] SECURITY.md: a client's FIN on a stream, like a reset, ends the stream and frees its place
    (a killed `curl` sends a FIN). Each case first fills the three places again, so the case
    before it freed them all."""
    gw = gateway
    streams = [SSEStream(gw.port, WATCH, {}) for _ in range(3)]
    try:
        assert [stream.status for stream in streams] == [200] * 3
        assert refusal(exchange(gw.port, CARD, method="GET"), 503)
        assert exchange(gw.port, head("GET", "/healthz", []), method="GET").status == 200
        for stream in streams:
            leave(stream)
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="every place freed")
        wait_for(lambda: exchange(gw.port, CARD, method="GET").status == 200, what="a request served again")
    finally:
        for stream in streams:
            with contextlib.suppress(OSError):
                stream.close()


def test_probes_in_flight_are_bounded_apart_from_the_open_requests():
    """[claim: probes-bounded] The door alone, in process: a probe whose answer is being computed holds one of
    PROBES_IN_FLIGHT and none of --max-connections' places; past PROBES_IN_FLIGHT a probe is
    refused, while a request still has its place. Once its answer starts, a probe's place is
    free, even while its client reads nothing (the server's send waits)."""
    from gateway.config.resolve import load
    from gateway.worker.access_log import AccessLog
    from gateway.worker.door import PROBES_IN_FLIGHT, Admission

    held, all_held, unread = [], asyncio.Event(), asyncio.Event()  # unread set: the answers computed
    unsent = asyncio.Event()  # set: the clients read at last

    async def app(scope, receive, send):
        if scope["path"] == "/healthz" and not unread.is_set():
            held.append(scope)
            if len(held) == PROBES_IN_FLIGHT:
                all_held.set()
            await unread.wait()  # computing
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/healthz":
            await unsent.wait()  # its client reads nothing
        await send({"type": "http.response.body", "body": b""})

    async def scenario() -> list:
        door = Admission(app, load(["--max-connections", "1"]), Tally(), AccessLog(False))

        async def ask(path: str, client: int = 0) -> int:
            answers = []

            async def send(message):
                answers.append(message.get("status"))
            await door({"type": "http", "path": path, "method": "GET", "headers": [], "raw_path": path.encode(),
                        "query_string": b"", "client": (f"10.0.0.{client}", 1)}, None, send)
            return answers[0]
        probes = [asyncio.ensure_future(ask("/healthz", n)) for n in range(PROBES_IN_FLIGHT)]
        await all_held.wait()
        statuses = [await ask("/healthz", 99), await ask("/.well-known/agent-card.json")]
        unread.set()
        while door.probes:  # every answer started, none read
            await asyncio.sleep(0)
        statuses.append(await ask("/readyz", 99))  # a place for it while the 16 answers wait unread
        unsent.set()
        statuses.append(await asyncio.gather(*probes))
        return statuses

    assert asyncio.run(scenario()) == [503, 200, 200, [200] * PROBES_IN_FLIGHT]


def test_a_worker_s_limit_places_and_descriptors_are_served_by_worker(gateway):
    """The headroom an operator alerts on (grafana/alerts.yml): per worker, its --max-connections,
    the requests it has in progress against it, and the descriptors it holds and may hold; a
    stream's end counted by its reason."""
    gw = gateway
    worker = wait_for(lambda: gw.worker_pids().get(0), what="the worker")
    by_worker = lambda name: scrape(gw.metrics_port)[f'murgw_{name}{{process="worker-0"}}']
    before = scrape(gw.metrics_port)
    assert before['murgw_worker_max_connections{process="worker-0"}'] == 3
    assert before['murgw_process_max_fds{process="worker-0"}'] == open_files_limit(worker)[0]
    left = before['murgw_stream_ends_total{reason="client_left"}']
    streams = [SSEStream(gw.port, WATCH, {}) for _ in range(3)]
    try:
        assert [stream.status for stream in streams] == [200] * 3
        full = wait_for(lambda: (s := scrape(gw.metrics_port))['murgw_worker_requests_open{process="worker-0"}']
                        == 3 and s, what="three places taken")
        assert refusal(exchange(gw.port, CARD, method="GET"), 503)  # at its limit, as the gauges say
        assert full['murgw_process_open_fds{process="worker-0"}'] >= \
            before['murgw_process_open_fds{process="worker-0"}'] + 3  # one a connection
    finally:
        for stream in streams:
            stream.close()
    wait_for(lambda: by_worker("worker_requests_open") == 0, what="every place given back")
    wait_for(lambda: scrape(gw.metrics_port)['murgw_stream_ends_total{reason="client_left"}'] == left + 3,
             what="three ends counted as client_left")
