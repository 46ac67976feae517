"""What one delivery costs the gateway over HTTP/2, against HTTP/1.1 (docs/benchmarks.md, "HTTP/2 against HTTP/1.1").

    taskset -c 1 python loadtest/h2cost.py [--watchers 200] [--rate 20] [--seconds 10]

Starts one gateway (one worker, `--sim-load RATE`) pinned to CPU 0 with `taskset -c 0`, for
each variant in turn, and attaches WATCHERS murmur.WatchSession streams from this process
(pin it elsewhere, as above). Variants: plain HTTP/1.1 (the front's chunks), HTTP/1.1 over TLS,
HTTP/2 over TLS with 100 streams a connection (hypercorn's SETTINGS_MAX_CONCURRENT_STREAMS;
a client that opens more at once loses the connection), and HTTP/2 with ten streams a
connection. After a warm-up it reads the server's CPU seconds from /proc (the worker, and the
whole process tree) over a window and divides by the deliveries the client counted (`id:`
lines received). The certificate is a throwaway one (trustme, the test extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
from typing import Callable

import h2.config
import h2.connection
import h2.events
import trustme

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gateway.bench_surface import cpu_seconds, process_tree  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = b'{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession","params":{}}'
HEADERS = [("content-type", "application/json"), ("a2a-version", "1.0"), ("last-event-id", str(2**40))]
WINDOW = 16 << 20
H2_STREAMS = {"h2, 100 streams a connection": 100, "h2, 10 streams a connection": 10}


class Counter:
    def __init__(self) -> None:
        self.ids = 0

    def feed(self, data: bytes) -> None:
        self.ids += data.count(b"\nid: ") + data.startswith(b"id: ")


async def http1_watcher(port: int, context: ssl.SSLContext | None, counter: Counter) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="127.0.0.1" if context else None)
    head = "".join(f"{k}: {v}\r\n" for k, v in HEADERS)
    writer.write(f"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(BODY)}\r\n{head}\r\n".encode() + BODY)
    while data := await reader.read(65536):
        counter.feed(data)


async def http2_connection(port: int, context: ssl.SSLContext | None, streams: int, counter: Counter) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.increment_flow_control_window(WINDOW)
    for _ in range(streams):
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(stream_id, [(b":method", b"POST"), (b":path", b"/"), (b":scheme", b"https"),
                                      (b":authority", b"127.0.0.1"), (b"content-length", str(len(BODY)).encode())]
                          + [(k.encode(), v.encode()) for k, v in HEADERS])
        conn.send_data(stream_id, BODY, end_stream=True)
        conn.increment_flow_control_window(WINDOW, stream_id=stream_id)
    writer.write(conn.data_to_send())
    while data := await reader.read(65536):
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                counter.feed(event.data)
                if event.flow_controlled_length:
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        writer.write(conn.data_to_send())


def throwaway_tls(folder: str) -> tuple[list[str], Callable[[str], ssl.SSLContext]]:
    """A throwaway CA's certificate for 127.0.0.1 written into `folder`: (the gateway's TLS
    options, a client context trusting it for one ALPN protocol)."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    certfile, keyfile = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    server.private_key_pem.write_to_path(keyfile)
    for i, pem in enumerate(server.cert_chain_pems):
        pem.write_to_path(certfile, append=i > 0)

    def client(alpn: str) -> ssl.SSLContext:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        context.set_alpn_protocols([alpn])
        return context
    return ["--certfile", certfile, "--keyfile", keyfile], client


def start_gateway(args, tls_args: list[str], log_path: str) -> tuple[subprocess.Popen, int, int]:
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "gateway", "--bind", "127.0.0.1:0", "--workers", "1",
           "--metrics-bind", "off", "--sim-load", str(args.rate), "--sim-load-size", str(args.size), *tls_args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None  # stdout=PIPE
    found = re.search(rb":(\d+)\s*$", proc.stdout.readline())
    assert found is not None, "the gateway printed no address"
    port = int(found.group(1))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log_path, "rb") as log:
            for line in log:
                if b'"worker serving"' in line:
                    return proc, port, json.loads(line)["pid"]
        time.sleep(0.1)
    raise RuntimeError("the worker never started")


async def measure(args, variant: str, tls_args: list[str], client: ssl.SSLContext | None, log_path: str) -> dict:
    proc, port, worker = start_gateway(args, tls_args, log_path)
    counter = Counter()
    try:
        if variant.startswith("h2"):
            per = H2_STREAMS[variant]
            tasks = [asyncio.create_task(http2_connection(port, client, per, counter))
                     for _ in range(args.watchers // per)]
        else:
            tasks = [asyncio.create_task(http1_watcher(port, client, counter)) for _ in range(args.watchers)]
        await asyncio.sleep(args.warmup)
        pids = process_tree(proc.pid)
        ids0, tree0 = counter.ids, cpu_seconds(pids)
        worker0, t0 = cpu_seconds([worker]), time.monotonic()
        await asyncio.sleep(args.seconds)
        ids1, tree1 = counter.ids, cpu_seconds(pids)
        worker1, t1 = cpu_seconds([worker]), time.monotonic()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        proc.terminate()
        proc.wait(15)
    deliveries = ids1 - ids0
    return {"variant": variant, "watchers": args.watchers, "deliveries_per_s": round(deliveries / (t1 - t0)),
            "expected_per_s": round(args.watchers * args.rate),
            "worker_us_per_delivery": round(1e6 * (worker1 - worker0) / max(1, deliveries), 2),
            "tree_us_per_delivery": round(1e6 * (tree1 - tree0) / max(1, deliveries), 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="--sim-load events per second")
    parser.add_argument("--size", type=int, default=200, help="--sim-load-size bytes")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="murgw-h2cost-") as tmp:
        tls_args, client = throwaway_tls(tmp)
        variants = [("http/1.1, plain", [], None), ("http/1.1, TLS", tls_args, client("http/1.1")),
                    ("h2, 100 streams a connection", tls_args, client("h2")),
                    ("h2, 10 streams a connection", tls_args, client("h2"))]
        for name, server_args, context in variants:
            print(json.dumps(await measure(args, name, server_args, context, os.path.join(tmp, "gateway.err"))),
                  flush=True)


if __name__ == "__main__":
    asyncio.run(main())
