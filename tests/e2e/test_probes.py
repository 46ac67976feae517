"""Probes no client can starve (SECURITY.md, probes): a probe holds its place only while its
answer is computed; a connection whose answers are unread is not read further (the front's
flow control), so never-reading pipelines hold bounded memory and no place; one client
address holds at most PROBES_PER_CLIENT places."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.tuning import PROBES_IN_FLIGHT, PROBES_PER_CLIENT
from gateway.worker.access_log import AccessLog
from gateway.worker.door.admission import Admission
from helpers.gateway_harness import GatewayOptions, Tally, rss_kib, wait_for
from helpers.raw_http import RAW_READ_TIMEOUT, never_reading, push, read_answer

PIPELINES = 100
PROBE = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
PIPELINE = PROBE * 100_000  # 3.5 MB: more than the kernel's buffers on both ends hold
RSS_GROWTH_MOST_KIB = 64 * 1024  # 100 connections x (a write buffer + a read): well under this


@pytest.fixture(scope="module")
def gateway_options():
    return GatewayOptions("--header-timeout", "120", workers=1)


def probe_from(port: int, address: str, path: bytes) -> bytes:
    with socket.socket() as sock:
        sock.settimeout(RAW_READ_TIMEOUT)
        sock.bind((address, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path)
        return read_answer(sock)[0]


def test_security_claim_never_reading_probe_pipelines_starve_no_probe(gateway):
    """[claim: probes-bounded] 100 connections from 127.0.0.1 each pipeline 100,000
    `/healthz` and never read: the server stops reading each (it takes a fraction of each
    pipeline), the worker's memory stays bounded, and every /healthz and /readyz from
    127.0.0.2 is answered 200 while they are held."""
    worker = next(iter(gateway.worker_pids().values()))
    before = rss_kib(worker)
    pipelines, sent = [], []
    try:
        for _ in range(PIPELINES):
            pipelines.append(never_reading(gateway.port))
            sent.append(0)

        def all_held() -> bool:
            moved = False
            for i, sock in enumerate(pipelines):
                now = push(sock, PIPELINE, sent[i])
                moved |= now != sent[i]
                sent[i] = now
            return not moved
        wait_for(all_held, timeout=120, what="every pipeline no longer read by the server")
        assert max(sent) < len(PIPELINE), f"a pipeline was read whole: its answers buffered without bound {sent}"
        for _ in range(3):
            for path in (b"/healthz", b"/readyz"):
                answer = probe_from(gateway.port, "127.0.0.2", path)
                assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
        # the pipelines' own address: a blocked write holds no place, so a fresh probe is answered
        assert probe_from(gateway.port, "127.0.0.1", b"/healthz").startswith(b"HTTP/1.1 200 OK\r\n")
        growth = rss_kib(worker) - before
        assert growth < RSS_GROWTH_MOST_KIB, f"the worker grew {growth} KiB holding the pipelines"
    finally:
        for sock in pipelines:
            sock.close()


def test_one_address_holds_at_most_its_share_of_probe_places():
    """A probe's places are held until its answer starts: with every probe waiting in its
    computation, one address gets PROBES_PER_CLIENT, then 503; another address still gets a place."""

    class Config:
        max_headers, max_header_bytes, max_connections, trusted_proxies, allowed_origins = 100, 8192, 10, (), ()

    async def main():
        release = asyncio.Event()
        statuses = []

        async def app(scope, receive, send):
            await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        admission = Admission(app, Config(), Tally(), AccessLog(False))

        async def probe(address: str):
            async def send(message):
                if message["type"] == "http.response.start":
                    statuses.append((address, message["status"]))
            scope = {"type": "http", "path": "/healthz", "method": "GET", "headers": [], "client": (address, 1)}
            await admission(scope, None, send)

        held = [asyncio.create_task(probe("10.0.0.1")) for _ in range(PROBES_PER_CLIENT + 2)]
        other = asyncio.create_task(probe("10.0.0.2"))
        await asyncio.sleep(0)
        assert admission.probes == PROBES_PER_CLIENT + 1 < PROBES_IN_FLIGHT
        assert statuses.count(("10.0.0.1", 503)) == 2
        release.set()
        await asyncio.gather(*held, other)
        assert admission.probes == 0 and not admission.probes_of
        assert statuses.count(("10.0.0.1", 200)) == PROBES_PER_CLIENT and ("10.0.0.2", 200) in statuses

    asyncio.run(main())


FLOODS, FLOOD_PROBES = 50, 200


def test_one_address_flooding_probes_takes_no_more_than_its_share(gateway):
    """50 connections from 127.0.0.3 each pipeline 200 `/readyz` and read the answers: every
    one is answered, none with the worker-wide 503, and 127.0.0.2's probes are answered 200
    throughout (the per-address count itself, which a real worker's probes computed one at a
    time never reach, is the test above's)."""
    floods = []
    try:
        for _ in range(FLOODS):
            sock = socket.socket()
            sock.bind(("127.0.0.3", 0))
            sock.connect(("127.0.0.1", gateway.port))
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n" * FLOOD_PROBES)
            sock.setblocking(False)
            floods.append([sock, b""])
        while any(data.count(b"HTTP/1.1 ") < FLOOD_PROBES for _, data in floods):
            answer = probe_from(gateway.port, "127.0.0.2", b"/healthz")
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
            for flood in floods:
                try:
                    while chunk := flood[0].recv(1 << 20):
                        flood[1] += chunk
                except BlockingIOError:
                    pass
        data = b"".join(data for _, data in floods)
        assert data.count(b"HTTP/1.1 ") == FLOODS * FLOOD_PROBES
        assert b"this worker is answering %d probes" % PROBES_IN_FLIGHT not in data
    finally:
        for sock, _ in floods:
            sock.close()
