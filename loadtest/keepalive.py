"""GetTask requests a second on one keep-alive HTTP/1.1 connection: what a request/response
answer costs the front of HTTP/1.1 connections (gateway/worker/http/front.py).

One gateway worker pinned to `--server-cpus` (default 0), this client to `--client-cpus`
(default 1). The client sends one `GetTask` (an unknown task: the sequencer's answer, -32001),
reads its whole answer, and sends the next, for `--seconds`, on one connection (a new one
when the server closes it at its keep-alive request limit); it reports the
requests answered a second, the median of `--repeats` runs.

    python -m loadtest.keepalive --seconds 5 --repeats 3

Bounded: each run by `--seconds`; the gateway started here is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtest.servers import ROOT, check_pinning, free_port, pinned, stop, wait_for_port  # noqa: E402

BODY = b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"tsk_none"}}'
CRLF, CRLF2 = b"\r\n", b"\r\n\r\n"
REQUEST = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))


def one_answer(sock: socket.socket) -> bool:
    """Read one Content-Length answer; whether the connection stays open after it."""
    data = b""
    while CRLF2 not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(CRLF2)
    length = int(head.lower().split(b"content-length: ")[1].split(CRLF)[0])
    while len(rest) < length:
        rest += sock.recv(65536)
    assert b"-32001" in rest[:length] and len(rest) == length, rest
    return b"connection: close" not in head.lower()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def wait_ready(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError("the gateway never became ready")


def run(port: int, seconds: float) -> tuple[float, int]:
    """Requests answered a second, one at a time; the connections it took (the server closes
    a connection at its keep-alive request limit)."""
    sock, count, connections = connect(port), 0, 1
    start = time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < seconds:
            sock.sendall(REQUEST)
            count += 1
            if not one_answer(sock):
                sock.close()
                sock, connections = connect(port), connections + 1
    finally:
        sock.close()
    return count / elapsed, connections


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--client-cpus", default="1")
    args = parser.parse_args(argv)
    if args.client_cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.client_cpus.split(",")})
    port = free_port()
    cmd = [sys.executable, "-m", "gateway", "--bind", f"127.0.0.1:{port}", "--workers", "1",
           "--metrics-bind", "off", "--access-log", "off", "--sim-load", "0"]
    proc = subprocess.Popen(pinned(cmd, args.server_cpus), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        wait_ready(port)
        time.sleep(1.0)  # the worker's start-up CPU is not the requests'
        check_pinning(proc.pid, args.server_cpus)
        runs = [run(port, args.seconds) for _ in range(args.repeats)]
    finally:
        stop(proc)
    print(json.dumps({"requests_per_second": round(statistics.median(rate for rate, _ in runs)),
                      "runs": [round(rate) for rate, _ in runs], "connections": [n for _, n in runs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
