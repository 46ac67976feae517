"""Idle watchers on a gateway with default flags: how many it serves, and what each costs.

Starts `python -m gateway` with its default flags (only the addresses are ephemeral, so it
cannot collide with another gateway on the box), opens `--watchers` idle
`murmur.WatchSession` streams from `--procs` client processes, waits `--settle` seconds, and prints
one JSON line: connected, refused (503, as the client saw them and as
`murgw_requests_refused_total{reason="capacity"}` counts them), other failures by reason, how the workers split
the connections, and the memory each watcher costs: the RSS and PSS (from
/proc/<pid>/smaps_rollup) of the gateway's process tree, the kernel's TCP buffer memory
(/proc/net/sockstat) and its slab memory (/proc/meminfo: socket, file and epoll structures,
machine-wide, so both ends of the loopback and anything else running), after minus before,
over the connected.

    python -m loadtest.idle20k --watchers 20000 --server-cpu 0 --client-cpu 1

Each client process raises its RLIMIT_NOFILE (hard too, where it may) to fit its share; a
process holds at most the hard limit, so 20,000 watchers under a hard limit of 20,000 need
two. The connections come from 127.0.0.1 to one port, so they need that many ephemeral
ports (net.ipv4.ip_local_port_range). Progress on stderr while it runs (the clients' own counts,
the gateway's /metrics), `--report DIR` the page with the ramp and the gateway's memory
(`loadtest/monitor.py`, `loadtest/report.py`). Bounded: every opening by `--connect-timeout`; the gateway
is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request

import orjson
import uvloop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gateway.bench_surface import process_tree  # noqa: E402
from loadtest import monitor, run_report  # noqa: E402
from loadtest.counts import Counts, keep_published  # noqa: E402
from loadtest.watcher import Tally, Watcher, build_request, open_watcher  # noqa: E402

METHOD = "murmur.WatchSession"
IN_FLIGHT = 512  # openings at once
START_TIMEOUT = 60.0


def raise_nofile(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, max(hard, needed)))
        except (ValueError, OSError):  # not root: as far as the hard limit goes
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def memory_kib(pids: list[int]) -> tuple[int, int]:
    """Summed (Rss, Pss) of these processes in KiB, from smaps_rollup."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            continue
    return rss, pss


def slab_kib() -> int:
    """The kernel's slab memory, machine-wide (sockets, files, epoll items live there)."""
    with open("/proc/meminfo") as fh:
        return int(next(line for line in fh if line.startswith("Slab:")).split()[1])


def tcp_mem_kib() -> int:
    with open("/proc/net/sockstat") as fh:
        line = next(line for line in fh if line.startswith("TCP:"))
    return int(line.split("mem")[1].split()[0]) * os.sysconf("SC_PAGE_SIZE") // 1024


def sockets(pid: int) -> int:
    try:
        return sum(1 for fd in os.listdir(f"/proc/{pid}/fd")
                   if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
    except OSError:
        return 0


def refused_total(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    found = re.search(r'^murgw_requests_refused_total\{reason="capacity"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else float("nan")


def start_gateway(cpu: int | None) -> tuple[subprocess.Popen, int, int]:
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    proc = subprocess.Popen([*pin, sys.executable, "-m", "gateway", "--bind", "127.0.0.1:0",
                             "--metrics-bind", "127.0.0.1:0", "--log-level", "warning"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = metrics_port = None
    deadline = time.monotonic() + START_TIMEOUT
    while (port is None or metrics_port is None) and time.monotonic() < deadline:
        assert proc.stdout is not None  # stdout=PIPE
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the gateway exited with {proc.wait()} before listening")
        if found := re.match(r"listening on http://[^:]+:(\d+)", line):
            port = int(found.group(1))
        elif found := re.match(r"metrics on http://[^:]+:(\d+)/metrics", line):
            metrics_port = int(found.group(1))
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200:
                assert port is not None and metrics_port is not None  # the loop above ran out only past the deadline
                return proc, port, metrics_port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the gateway never became ready")


async def open_all(port: int, count: int, timeout: float, counts: Counts,
                   slot: int) -> tuple[Tally, list[Watcher]]:
    loop = asyncio.get_running_loop()
    tally = Tally(1)
    publishing = loop.create_task(keep_published(counts, slot, tally))
    request = build_request(f"http://127.0.0.1:{port}/", "murmur", METHOD, 0)
    gate = asyncio.Semaphore(IN_FLIGHT)
    deadline = loop.time() + timeout
    opened: list[Watcher] = []

    async def open_one() -> None:
        async with gate:
            watcher = Watcher(tally, request, "murmur")
            failure = await open_watcher(watcher, "127.0.0.1", port, deadline)
        if failure is None:
            tally.opened += 1
            opened.append(watcher)
        else:
            tally.fail(failure)

    await asyncio.gather(*(open_one() for _ in range(count)))
    publishing.cancel()
    counts.publish(slot, tally)
    return tally, opened


def client_process(args, port: int, share: int, conn, slot: int) -> None:
    """Open `share` watchers, report the tally, hold them until the parent says close."""
    raise_nofile(share + 256)
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    loop = uvloop.new_event_loop()
    tally, watchers = loop.run_until_complete(open_all(port, share, args.connect_timeout,
                                                       Counts(args.counts), slot))
    conn.send({"opened": tally.opened, "failures": tally.failures,
               "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]})
    conn.poll(args.connect_timeout + args.settle + 600)
    conn.send({"closed_early": tally.closed_early})
    for watcher in watchers:
        watcher.close()
    loop.close()


def open_clients(args, port: int) -> tuple[dict, list]:
    """Start the client processes; their summed figures once all have opened their share."""
    ctx = multiprocessing.get_context("spawn")
    clients = []
    for index in range(args.procs):
        share = args.watchers // args.procs + (index < args.watchers % args.procs)
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=client_process, args=(args, port, share, child, index), daemon=True)
        proc.start()
        clients.append((proc, parent))
    total: dict = {"opened": 0, "failures": {}, "nofile": []}
    for _proc, conn in clients:
        report = conn.recv()
        total["opened"] += report["opened"]
        total["nofile"].append(report["nofile"])
        for reason, count in report["failures"].items():
            total["failures"][reason] = total["failures"].get(reason, 0) + count
    return total, clients


def close_clients(clients) -> int:
    """Tell every client to close; the connections that ended before that, summed."""
    early = 0
    for proc, conn in clients:
        conn.send("close")
        early += conn.recv()["closed_early"]
        proc.join(30)
    return early


def run(args, watching: monitor.Monitor) -> dict:
    proc, port, metrics_port = start_gateway(args.server_cpu)
    counts = Counts(args.counts, slots=args.procs)
    counts.set_phase("starting", target=args.watchers)
    try:
        with watching.following("gateway", pid=proc.pid, metrics_port=metrics_port, counts=counts):
            return measure(args, proc, port, metrics_port, counts)
    finally:
        counts.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(args, proc: subprocess.Popen, port: int, metrics_port: int, counts: Counts) -> dict:
    time.sleep(1.0)  # the workers' own start-up settles
    pids = process_tree(proc.pid)
    before, tcp_before, slab_before = memory_kib(pids), tcp_mem_kib(), slab_kib()
    sockets_before = {pid: sockets(pid) for pid in pids}
    refused_before = refused_total(metrics_port)
    started = time.monotonic()
    counts.set_phase("connecting", args.connect_timeout)
    tally, clients = open_clients(args, port)
    open_s = time.monotonic() - started
    counts.set_phase("settling", args.settle)
    time.sleep(args.settle)
    after, tcp_after, slab_after = memory_kib(pids), tcp_mem_kib(), slab_kib()
    per_process = {pid: sockets(pid) - sockets_before[pid] for pid in pids}
    refused_counted = refused_total(metrics_port) - refused_before
    counts.set_phase("closing")
    closed_early = close_clients(clients)
    connected = tally["opened"] - closed_early
    each = max(1, connected)
    result = {
        "watchers": args.watchers, "connected": connected, "refused": tally["failures"].get("http 503", 0),
        "refused_counted": refused_counted, "failures": tally["failures"],
        "closed_early": closed_early, "open_s": round(open_s, 1),
        "connections_per_process": sorted(n for n in per_process.values() if n > 0),
        "rss_kib_per_watcher": round((after[0] - before[0]) / each, 2),
        "pss_kib_per_watcher": round((after[1] - before[1]) / each, 2),
        "kernel_tcp_kib_per_watcher": round((tcp_after - tcp_before) / each, 2),
        "kernel_slab_kib_per_watcher": round((slab_after - slab_before) / each, 2),
        "server_rss_mib": round(after[0] / 1024, 1), "server_pss_mib": round(after[1] / 1024, 1),
        "nofile_clients": tally["nofile"],
    }
    return result


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watchers", type=int, default=20000)
    parser.add_argument("--server-cpu", type=int, default=None, help="pin the gateway (taskset -c)")
    parser.add_argument("--client-cpu", type=int, default=None, help="pin this client")
    parser.add_argument("--procs", type=int, default=2, help="client processes sharing the watchers")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds idle before measuring")
    parser.add_argument("--connect-timeout", type=float, default=300.0)
    run_report.add_options(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    started = run_report.utc_now()
    with tempfile.TemporaryDirectory(prefix="idle20k-") as tmp, \
            monitor.Monitor("idle20k", quiet=args.quiet, plain_every=args.progress_every) as watching:
        args.counts = os.path.join(tmp, "counts")
        result = run(args, watching)
    print(orjson.dumps(result).decode(), flush=True)
    run_report.finish(watching, args, "loadtest.idle20k", argv, started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
