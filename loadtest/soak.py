"""Soak: a gateway under moderate load for a long time, watchers churning, resources sampled.

Starts `python -m gateway --sim-load RATE`, then runs the load driver (`loadtest.driver`) in
back-to-back cycles: each cycle opens `--watchers` new connections (resuming with
`Last-Event-ID`, as reconnecting clients do), holds them for the cycle, checks every id, and
closes them, so connections churn all along. Between cycles it samples the gateway's process
tree: RSS, open file descriptors, and its shared-memory segments. At the end it prints one JSON
line comparing the first and the last `--window` minutes, and every cycle's figures.

    python -m loadtest.soak --minutes 30 --watchers 300 --rate 100

`--url URL --server-pid PID` soaks a gateway it did not start (its own load, its own door:
the token options are loadtest/bearer.py's, sent by every cycle's driver).

Progress on stderr while it runs (each cycle's driver counts, the gateway's /metrics, the time
left of the soak), `--report DIR` the page with the whole soak's charts (`loadtest/monitor.py`,
`loadtest/report.py`). Everything is bounded: the cycle count follows from --minutes, each driver run has its own
time limits, and the gateway is stopped (SIGTERM, then SIGKILL) at the end.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from gateway.bench_surface import open_descriptors, process_tree, rss_kib
from loadtest import bearer, monitor, run_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def open_fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += open_descriptors(pid)
        except OSError:
            pass
    return total


def rss_anon_kib(pids: list[int]) -> int:
    """Private memory only. RSS also counts the pages of the shared ring each process has
    touched, which grows until the 64 MiB arena has wrapped once: not a leak."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("RssAnon:"))
        except (OSError, StopIteration):
            pass
    return total


def shm_bytes(supervisor: int) -> int:
    """Bytes of the session's segments: memfds the supervisor holds (none once it is gone)."""
    total = 0
    for link in glob.glob(f"/proc/{supervisor}/fd/*"):
        try:
            if os.readlink(link).startswith(f"/memfd:murgw-{supervisor}-"):
                total += os.stat(link).st_size
        except OSError:
            continue  # closed while we looked
    return total


def sample(supervisor: int) -> dict:
    pids = process_tree(supervisor)
    return {"t": time.time(), "rss_kib": rss_kib(pids), "rss_anon_kib": rss_anon_kib(pids),
            "fds": open_fds(pids),
            "shm_bytes": shm_bytes(supervisor), "processes": len(pids)}


def ready(url: str, gateway: subprocess.Popen | None, timeout: float = 60.0) -> None:
    """Wait (bounded) until the gateway answers /readyz: its workers serve."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gateway is not None and gateway.poll() is not None:
            raise RuntimeError(f"the gateway exited with {gateway.returncode}")
        try:
            if urllib.request.urlopen(url.rstrip("/") + "/readyz", timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the gateway was not ready within {timeout} s")


def cycle(url: str, supervisor: int, args, counts: str) -> dict:
    cmd = [sys.executable, "-m", "loadtest.driver", "--url", url,
           "--watchers", str(args.watchers), "--duration", str(args.cycle - args.warmup - 2),
           "--warmup", str(args.warmup), "--server-pid", str(supervisor), "--label", "soak",
           "--counts", counts, "--quiet", *bearer.argv(args)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.cycle * 3)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": done.stderr[-500:]}


def mean(rows: list[dict], key: str) -> float:
    values = [row[key] for row in rows if row.get(key) is not None]  # a failed cycle has no figures
    return round(sum(values) / len(values), 1) if values else 0.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--watchers", type=int, default=300)
    p.add_argument("--rate", type=float, default=100.0, help="--sim-load events a second")
    p.add_argument("--size", type=int, default=300)
    p.add_argument("--cycle", type=float, default=60.0, help="seconds per churn cycle")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--window", type=float, default=5.0, help="minutes compared at start and end")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--url", help="soak this gateway instead of starting one (its load is its own: --rate, --size "
                                 "and --workers are not used); needs --server-pid")
    p.add_argument("--server-pid", type=int, default=0, help="with --url: its supervisor's pid (the samples' tree)")
    p.add_argument("--metrics-port", type=int, help="with --url: its metrics port, for the progress")
    run_report.add_options(p)
    bearer.add_options(p)
    args = p.parse_args(argv)
    bearer.from_args(args)
    if args.url and not args.server_pid:
        p.error("--url needs --server-pid: a soak samples the server's memory, descriptors and segments")
    started_at = run_report.utc_now()
    gateway, url, supervisor, metrics_port = None, args.url, args.server_pid, args.metrics_port
    if url is None:
        port, metrics_port = free_port(), free_port()
        gateway = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--bind", f"127.0.0.1:{port}", "--workers", str(args.workers),
             "--metrics-bind", f"127.0.0.1:{metrics_port}", "--sim-load", str(args.rate),
             "--sim-load-size", str(args.size), "--log-level", "warning"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url, supervisor = f"http://127.0.0.1:{port}/", gateway.pid
    rows = []
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="soak-")
    counts = os.path.join(tmp, "counts")
    try:
        with monitor.Monitor("soak", quiet=args.quiet, plain_every=args.progress_every) as watching, \
                watching.following("gateway", pid=supervisor, metrics_port=metrics_port) as followed:
            watching.phase("starting", args.minutes * 60, args.watchers)
            ready(url, gateway)
            started = time.monotonic()  # the soak's minutes count from a serving gateway
            rows = cycles(args, url, supervisor, counts, started, watching, followed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if gateway is not None:  # one it started; a --url gateway is left as it was found
            gateway.send_signal(signal.SIGTERM)
            try:
                gateway.wait(15)
            except subprocess.TimeoutExpired:
                gateway.kill()
    first = [r for r in rows if r["minute"] <= args.window]
    last = [r for r in rows if r["minute"] >= rows[-1]["minute"] - args.window] if rows else []
    summary = {key: {"first": mean(first, key), "last": mean(last, key)}
               for key in ("rss_kib", "rss_anon_kib", "fds", "shm_bytes", "deliveries_per_s", "latency_p99_ms")}
    result = {"cycles": len(rows), "minutes": args.minutes, "watchers": args.watchers,
              "rate": args.rate, "summary": summary,
              "events_lost": sum(r["events_lost"] or 0 for r in rows),
              "unexplained_holes": sum(r["unexplained_holes"] or 0 for r in rows),
              "order_violations": sum(r["order_violations"] or 0 for r in rows),
              "failed_connections": sum(r["failed"] or 0 for r in rows),
              "shm_left_after_stop": shm_bytes(gateway.pid) if gateway is not None else None,
              "cycles_detail": rows}
    print(json.dumps(result))
    run_report.finish(watching, args, "loadtest.soak", argv, started_at, result)
    return 0


def cycles(args, url: str, supervisor: int, counts: str, started: float, watching: monitor.Monitor,
           gateway: monitor.Followed) -> list[dict]:
    """Driver runs back to back until the soak's minutes are up; a row of figures for each.
    The progress follows each cycle's counts (a new file a cycle: the driver creates it)."""
    rows: list[dict] = []
    while time.monotonic() - started < args.minutes * 60:
        watching.phase("soak", args.minutes * 60 - (time.monotonic() - started))
        gateway.counts = f"{counts}-{len(rows)}"
        report = cycle(url, supervisor, args, f"{counts}-{len(rows)}")
        rows.append({**sample(supervisor), "minute": round((time.monotonic() - started) / 60, 2),
                     "opened": report.get("opened"), "failed": report.get("failed"),
                     "deliveries_per_s": report.get("deliveries_per_s"),
                     "events_lost": report.get("events_lost"),
                     "unexplained_holes": report.get("unexplained_holes"),
                     "order_violations": report.get("order_violations"),
                     "latency_p99_ms": report.get("latency_ms", {}).get("p99"),
                     "latency_ms": report.get("latency_ms"), "latency_ms_by_second": report.get("latency_ms_by_second"),
                     **({"error": report["error"]} if "error" in report else {})})
        if not args.quiet:
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
