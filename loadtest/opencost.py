"""What opening a stream costs the gateway over TLS and HTTP/2, against plain HTTP/1.1
(docs/benchmarks.md, "The figures other pages quote"; docs/sizing.md plans CPU with them).

    taskset -c 1 python -m loadtest.opencost [--openings 2000] [--concurrency 50]

For each variant in turn, starts one gateway (one worker, no load, heartbeats 300 s apart)
pinned to CPU 0 with `taskset -c 0` (loadtest/h2cost.py's start), and opens OPENINGS
`murmur.WatchSession` streams from this process (pin it elsewhere, as above), CONCURRENCY at a
time, each on a connection of its own, up to its response head; the streams stay open until
every one has. The server's CPU seconds (the worker, and the whole process tree; /proc) over
that phase, divided by the openings, is the figure. Variants: plain HTTP/1.1; HTTP/1.1 over TLS
(a full handshake each, no session resumed); HTTP/2 over TLS (a connection and one stream
each). One JSON line per variant. The certificate is a throwaway one (trustme, the test
extra). What a bearer token adds (a static token, a JWT kept, a fresh JWT of each algorithm)
is `loadtest.openings --token-modes`'s (loadtest/opening_tokens.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import tempfile
import time
import types

import h2.config
import h2.connection
import h2.events

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.bench_surface import cpu_seconds, process_tree  # noqa: E402
from loadtest.h2cost import BODY, HEADERS, start_gateway, throwaway_tls  # noqa: E402

async def open_http1(port: int, context: ssl.SSLContext | None) -> asyncio.StreamWriter:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="127.0.0.1" if context else None)
    head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS)
    writer.write(f"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(BODY)}\r\n{head}\r\n".encode() + BODY)
    status = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in status.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"opening refused: {status[:80]!r}")
    return writer


async def open_h2(port: int, context: ssl.SSLContext) -> asyncio.StreamWriter:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(stream_id, [(b":method", b"POST"), (b":path", b"/"), (b":scheme", b"https"),
                                  (b":authority", b"127.0.0.1"), (b"content-length", str(len(BODY)).encode())]
                      + [(k.encode(), v.encode()) for k, v in HEADERS])
    conn.send_data(stream_id, BODY, end_stream=True)
    writer.write(conn.data_to_send())
    while data := await reader.read(65536):
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                if dict(event.headers).get(b":status") != b"200":
                    raise RuntimeError(f"opening refused: {event.headers!r}")
                return writer
        writer.write(conn.data_to_send())
    raise RuntimeError("the connection closed before a response")


async def measure(args, variant: str, server_args: list[str], opener, log_path: str) -> dict:
    proc, port, worker = start_gateway(types.SimpleNamespace(rate=0, size=0),
                                       ["--heartbeat-interval", "300", *server_args], log_path)
    gate, writers = asyncio.Semaphore(args.concurrency), []

    async def one():
        async with gate:
            writers.append(await opener(port))
    try:
        await asyncio.sleep(args.settle)  # the worker's start-up CPU is not the openings'
        pids = process_tree(proc.pid)
        tree0, worker0, t0 = cpu_seconds(pids), cpu_seconds([worker]), time.monotonic()
        await asyncio.gather(*(one() for _ in range(args.openings)))
        tree1, worker1, t1 = cpu_seconds(pids), cpu_seconds([worker]), time.monotonic()
        for writer in writers:
            writer.transport.abort()
    finally:
        proc.terminate()
        proc.wait(15)
    n = args.openings
    return {"variant": variant, "openings": n, "open_s": round(t1 - t0, 2),
            "worker_us_per_opening": round(1e6 * (worker1 - worker0) / n, 1),
            "tree_us_per_opening": round(1e6 * (tree1 - tree0) / n, 1)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openings", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--settle", type=float, default=1.0, help="seconds after the worker serves")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="murgw-opencost-") as tmp:
        tls_args, client = throwaway_tls(tmp)
        h1_tls, h2_tls = client("http/1.1"), client("h2")
        variants = [("http/1.1, plain", [], lambda port: open_http1(port, None)),
                    ("http/1.1, TLS", tls_args, lambda port: open_http1(port, h1_tls)),
                    ("h2, TLS, one stream a connection", tls_args, lambda port: open_h2(port, h2_tls))]
        for name, server_args, opener in variants:
            print(json.dumps(await measure(args, name, server_args, opener, os.path.join(tmp, "gateway.err"))),
                  flush=True)


if __name__ == "__main__":
    asyncio.run(main())
