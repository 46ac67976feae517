"""Run an external SSE reader (csse) behind the driver's command line and JSON report.

`loadtest/bench.py --client CMD` runs CMD followed by `loadtest/driver.py`'s options and
reads the driver's one-line JSON report. The csse reader (epoll, C) costs a fraction of the
driver's CPU per event, which matters when client and server share a small machine, but has
options and a report of its own. This wrapper translates both ways:

    python -m loadtest.bench --client "python -m loadtest.csse_client /tmp/csse" ...

- murmur dialect: one probe stream reads the newest event id first, and csse sends it as
  `Last-Event-ID`, so a new watcher is not handed the whole replay buffer; whatever arrived
  during the ramp is drained in `--warmup` (csse's `--go-delay`) before the window opens.
  Ids are checked with csse's `--track-ids` (holes, order, lagged and gap frames).
- nchan dialect: a GET EventSource subscriber; csse cannot read the publisher's sequence
  number, so losses are reported as unknown (null), and deliveries tell what arrived.

Server CPU and RSS come from the `--server-pid` tree over csse's window (its ready file marks
the start), as in the driver. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gateway.bench_surface import cpu_seconds, process_tree, rss_kib  # noqa: E402
from loadtest.driver import parse_args  # noqa: E402
from loadtest.watcher import build_request  # noqa: E402

PROBE_SECONDS = 0.5  # long enough for the replay burst; ids keep coming at the load's rate
EVENT_ID = re.compile(rb"(?m)^id: (\d+)\r?$")


def newest_id(url: str, method: str, authorization: bytes = b"") -> int:
    """The highest event id one stream sees in PROBE_SECONDS (0 when none came); `authorization`
    the header line through a door (loadtest/bearer.py's `Bearer.header`)."""
    parts = urlsplit(url)
    newest, tail = 0, b""
    deadline = time.monotonic() + PROBE_SECONDS
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=PROBE_SECONDS) as sock:
        sock.sendall(build_request(url, "murmur", method, 0, authorization))
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                break
            if not data:
                break
            block = tail + data
            ids = EVENT_ID.findall(block)
            if ids:
                newest = max(newest, int(ids[-1]))
            tail = block[-32:]
    return newest


def csse_command(binary: list[str], args, ready: str) -> list[str]:
    cmd = binary + [args.url, "-n", str(args.watchers), "--procs", str(args.procs),
                    "--duration", str(args.duration), "--go-delay", str(args.warmup),
                    "--connect-timeout", str(args.connect_timeout),
                    "--lat-conns", str(max(1, args.watchers // max(1, args.sample_every))),
                    "--ready-file", ready]
    if args.dialect == "murmur":
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": args.method, "params": {}}).decode()
        cmd += ["--mode", "post", "--body", body, "--track-ids",
                "--last-event-id", str(newest_id(args.url, args.method))]
    return cmd


def wait_ready(path: str, proc: subprocess.Popen, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path, "rb") as fh:
                return orjson.loads(fh.read())
        if proc.poll() is not None:
            raise RuntimeError(f"csse exited with {proc.returncode} before its window")
        time.sleep(0.01)
    raise TimeoutError("csse did not open its window in time")


def driver_report(args, out: dict, server_cpu: float | None, rss: tuple[int, int] | None) -> dict:
    """csse's report in the driver's shape (the fields bench.py reads)."""
    window = out.get("window_s") or args.duration
    murmur = args.dialect == "murmur"
    holes = out.get("ids_holes_total", 0)
    unexplained = holes - out.get("ids_holes_announced", 0) if murmur else None
    return {
        "label": args.label, "dialect": args.dialect, "watchers": args.watchers, "procs": args.procs,
        "client": "csse", "opened": out["conns_opened"], "failed": out["conns_failed"],
        "failures": out.get("fail_reasons", {}), "closed_early": out.get("closed_by_server", 0),
        "ramp_s": out.get("connect_wall_s"), "window_s": window, "clients_missing": 0,
        "deliveries": out["events_total"], "deliveries_per_s": round(out["events_total"] / window),
        "events_before_window": out.get("events_before_go"),
        "latency_ms": {"count": out.get("latency_samples", 0), "p50": out.get("lat_ms_p50"),
                       "p99": out.get("lat_ms_p99"), "max": out.get("lat_ms_max")},
        "latency_sample_every": args.sample_every,
        "heartbeats": out.get("heartbeats"),
        # murmur: every id missing in the window; unexplained: those no lagged/gap frame announced
        "events_lost": holes if murmur else None,
        "lagged_frames": out.get("lagged_frames", 0), "gap_frames": out.get("gap_frames", 0),
        "unexplained_holes": unexplained, "order_violations": out.get("ids_nonascending", 0) if murmur else None,
        "client_cpu_s": out.get("client_cpu_window_s"),
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 2),
        "server_rss_kib_before": rss[0] if rss else None,
        "server_rss_kib_connected": rss[1] if rss else None,
        "errors": out.get("errors", []),
    }


def run(binary: list[str], args) -> dict:
    server = process_tree(args.server_pid) if args.server_pid else []
    rss_before = rss_kib(server)
    with tempfile.TemporaryDirectory(prefix="csse-") as tmp:
        ready = os.path.join(tmp, "ready.json")
        proc = subprocess.Popen(csse_command(binary, args, ready), stdout=subprocess.PIPE, text=True)
        try:
            go = wait_ready(ready, proc, args.connect_timeout + args.warmup + 30)
            server = process_tree(args.server_pid) if args.server_pid else []
            cpu = cpu_seconds(server)
            time.sleep(max(0.0, go["t_go_ns"] / 1e9 + args.duration - time.time()))
            cpu = cpu_seconds(server) - cpu
            rss_connected = rss_kib(server)
            stdout, _ = proc.communicate(timeout=args.duration + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"csse wrote no report (exit {proc.returncode})")
    return driver_report(args, orjson.loads(lines[-1]), cpu if server else None,
                         (rss_before, rss_connected) if server else None)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = next((i for i, word in enumerate(argv) if word.startswith("--")), len(argv))
    binary, options = argv[:split], argv[split:]
    if not binary:
        sys.exit("usage: python -m loadtest.csse_client CSSE_BINARY [driver options]")
    report = run(binary, parse_args(options))
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0 if report["opened"] else 1


if __name__ == "__main__":
    sys.exit(main())
