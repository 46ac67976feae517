"""High-connection SSE load driver: N watchers over K client processes, one JSON line out.

Each client process runs uvloop with raw `asyncio.Protocol` connections (loadtest/watcher.py,
no HTTP library): each writes the request, reads the response head, undoes chunked framing
when the server used it, and scans whole SSE events with a few compiled regular expressions
per read, so the client spends microseconds per event, not per byte. It speaks two dialects:

- `murmur` (the gateway and the naive baseline): POST `murmur.WatchSession`; numeric `id:`
  lines; `lagged` and `gap` frames. A new connection sends the newest id its process has
  seen as `Last-Event-ID` (the first one sends 0), as a resuming client would, so 10,000
  openings do not each replay the whole 512-event buffer.
- `nchan`: GET with `Accept: text/event-stream`; ids are nchan's `<time>:<tag>`, which must
  be strictly ascending; losses are read from the sequence number the bench's publisher
  puts after the timestamp (nchan has no lagged frame, and its tags restart every second).

Per connection it checks the ids: strictly ascending, never repeated, the first one right
after the `Last-Event-ID` sent, and a hole only where a `lagged` frame (its `missed`) or a
`gap` frame accounts for it. Failed openings are counted by reason (`connect timeout`,
`head timeout`, `connect refused`, `head reset`, `http 503`, ...). Latency is now minus
the encode time at the start of each load event's text (`--sim-load` on the gateway, the
bench's publishers elsewhere); with `--sample-every S` one event in S is timed. The report
gives the timed deliveries' p50/p99/max over the window (`latency_ms`) and in each second of it
(`latency_ms_by_second`, which `--report`'s chart draws), from the same samples. Heartbeat
intervals are measured from the connection's opening.

The figures cover a measuring window that starts `--warmup` seconds after every connection
is open and lasts `--duration` seconds; server CPU and RSS come from the process tree of
`--server-pid`. Every loop is bounded: connections, the ramp (`--connect-timeout`), and the
window.

While it runs, each client process publishes its tally (opened, failed, deliveries, lost)
to a shared counts file (`loadtest/monitor.py`'s `Counts`) with the phase
it is in: the driver shows them as progress on stderr (`--quiet`: none), or, with `--counts
PATH`, a parent command (bench, soak) reads them and the driver shows nothing. `--report DIR`
writes the run's page and charts (`loadtest/report.py`). Through a door, each watcher sends the
bearer token loadtest/bearer.py's options give (`--token`, or a JWT of its own with `--jwt-key`).

    python -m loadtest.driver --url http://127.0.0.1:52222/ --watchers 1000 --duration 10
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import math
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from urllib.parse import urlsplit

import orjson
import uvloop

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gateway.bench_surface import cpu_seconds, process_tree, rss_kib  # noqa: E402
from loadtest import bearer, monitor, run_report  # noqa: E402
from loadtest.counts import Counts, keep_published  # noqa: E402
from loadtest.watcher import Tally, Watcher, build_request, open_watcher  # noqa: E402

MAX_HANDSHAKES = 512  # connections being opened at once, per client process


async def client_main(args, share: int, conn, slot: int = 0) -> None:
    """One client process: open `share` watchers, report, measure the window, report again;
    its tally goes to its slot of the shared counts all along (the progress reads them)."""
    loop = asyncio.get_running_loop()
    parts = urlsplit(args.url)
    host, port = parts.hostname, parts.port or 80
    tally = Tally(args.sample_every)
    counts = Counts(args.counts)
    publishing = loop.create_task(keep_published(counts, slot, tally))
    watchers: list[Watcher] = []
    gate = asyncio.Semaphore(MAX_HANDSHAKES)
    ramp_deadline = loop.time() + args.connect_timeout
    first_user = slot * -(-args.watchers // args.procs)  # each watcher a simulated user of its own
    users = iter(range(first_user, first_user + share))
    door = bearer.from_args(args)

    async def open_one() -> None:
        async with gate:
            resume_from = tally.newest_id if args.dialect == "murmur" else 0
            request = build_request(args.url, args.dialect, args.method, resume_from, door.header(next(users)))
            watcher = Watcher(tally, request, args.dialect, resume_from)
            # a cancelled opening is counted by the ramp's deadline below
            failure = await open_watcher(watcher, host, port, ramp_deadline)
            if failure is not None:
                tally.fail(failure)
                return
            tally.opened += 1
            watchers.append(watcher)

    # The first opening replays the buffer; later ones resume from the newest id it has seen.
    await open_one()
    resume_wait = min(ramp_deadline, loop.time() + 2.0)  # an idle server has no id to resume from
    while tally.opened and not tally.newest_id and loop.time() < resume_wait and args.dialect == "murmur":
        await asyncio.sleep(0.02)
    per_second = max(1.0, args.ramp_rate / args.procs)
    openings = []
    # Open what the schedule says is due, then sleep: on a loop saturated by the streams
    # already open, one sleep can last seconds, and a fixed step per sleep would stretch
    # the ramp past its deadline.
    ramp_start, index = loop.time(), 1
    while index < share:
        if loop.time() > ramp_deadline:
            tally.fail("ramp deadline", share - index)
            break
        due = min(share, 1 + int((loop.time() - ramp_start) * per_second))
        while index < due:
            openings.append(loop.create_task(open_one()))
            index += 1
        await asyncio.sleep(0.02)
    if openings:  # a saturated server may leave handshakes hanging: the deadline ends them
        _, hanging = await asyncio.wait(openings, timeout=max(0.0, ramp_deadline - loop.time()) + 1.0)
        for opening in hanging:
            opening.cancel()
        if hanging:
            tally.fail("ramp deadline", len(hanging))
    conn.send(("open", tally.opened, tally.failed))

    start, end = await loop.run_in_executor(None, conn.recv)
    await asyncio.sleep(max(0.0, start - time.time()))
    cpu_before = _own_cpu()
    tally.measuring = True
    await asyncio.sleep(max(0.0, end - time.time()))
    tally.measuring = False
    cpu = _own_cpu() - cpu_before
    publishing.cancel()
    counts.publish(slot, tally)
    for watcher in watchers:
        watcher.close()
    conn.send({
        "opened": tally.opened, "failed": tally.failed, "failures": tally.failures,
        "closed_early": tally.closed_early, "deliveries": tally.deliveries, "bytes": tally.bytes,
        "events_lost": tally.events_lost,
        "lagged_frames": tally.lagged_frames, "unexplained_holes": tally.unexplained_holes,
        "order_violations": tally.order_violations, "cpu_s": cpu,
        "latency_us": tally.latency_us.tobytes(), "arrived_ms": tally.arrived_ms.tobytes(),
        "heartbeat_s": tally.heartbeat_s.tobytes(),
    })


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def client_process(args, share: int, conn, slot: int = 0) -> None:
    uvloop.run(client_main(args, share, conn, slot))


def raise_nofile(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def quantiles(values, scale: float = 1.0) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    pick = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale, 3)  # noqa: E731
    return {"count": len(ordered), "p50": pick(0.50), "p99": pick(0.99), "max": round(ordered[-1] * scale, 3)}


def latency_by_second(latency_us, arrived_ms, start: float, end: float) -> list[dict]:
    """The window's timed deliveries by the second of the window they arrived in: each second's
    `quantiles` (ms), `at` its end (epoch s; one arriving as the window closed counts in its last
    second). The same samples, the same function, as the window's `latency_ms`: the report
    draws these, so its chart and its table cannot disagree."""
    last = max(0, math.ceil(end - start) - 1)
    seconds: dict[int, list[int]] = {}
    for us, at in zip(latency_us, arrived_ms):
        seconds.setdefault(min(last, max(0, int(at / 1000 - start))), []).append(us)
    return [{"at": round(start + second + 1, 3), **quantiles(values, 0.001)}
            for second, values in sorted(seconds.items())]


def run(args) -> dict:
    """The run; its counts go to `args.counts` (a file a parent command reads), else a temporary one."""
    raise_nofile(args.watchers // args.procs + 256)
    server = process_tree(args.server_pid) if args.server_pid else []
    rss_before = rss_kib(server)
    ctx = multiprocessing.get_context("fork")
    shares = [args.watchers // args.procs + (i < args.watchers % args.procs) for i in range(args.procs)]
    with contextlib.ExitStack() as stack:
        if not args.counts:
            args.counts = stack.enter_context(tempfile.TemporaryDirectory(prefix="driver-")) + "/counts"
        counts = Counts(args.counts, slots=len(shares))
        counts.set_phase("connecting", args.connect_timeout, args.watchers)
        try:
            return _run_clients(args, ctx, shares, counts, server, rss_before)
        finally:
            counts.set_phase("done")
            counts.close()


def _run_clients(args, ctx, shares: list[int], counts: Counts, server: list[int], rss_before: int) -> dict:
    pipes, procs = [], []
    for slot, share in enumerate(shares):
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(target=client_process, args=(args, share, child_end, slot), daemon=True)
        proc.start()
        pipes.append(parent_end)
        procs.append(proc)
    try:
        return _measure(args, pipes, server, rss_before, counts)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def _receive(pipe, timeout: float):
    if not pipe.poll(timeout):
        raise TimeoutError("a client process did not answer in time")
    return pipe.recv()


def _measure(args, pipes, server: list[int], rss_before: int, counts: Counts) -> dict:
    ramp_started = time.monotonic()
    for pipe in pipes:
        _receive(pipe, args.connect_timeout + 30)
    ramp_s = time.monotonic() - ramp_started
    start = time.time() + args.warmup
    end = start + args.duration
    for pipe in pipes:
        pipe.send((start, end))
    counts.set_phase("warmup", args.warmup)
    time.sleep(max(0.0, start - time.time()))
    counts.set_phase("window", args.duration)
    server = process_tree(args.server_pid) if args.server_pid else server
    server_cpu = cpu_seconds(server)
    time.sleep(max(0.0, end - time.time()))
    server_cpu = cpu_seconds(server) - server_cpu
    rss_connected = rss_kib(server)
    counts.set_phase("closing")
    results, missing = [], 0
    for pipe in pipes:  # a client process that never reports is counted, not waited for forever
        try:
            results.append(_receive(pipe, 60))
        except (TimeoutError, EOFError):
            missing += 1

    total = {key: sum(r[key] for r in results) for key in (
        "opened", "failed", "closed_early", "deliveries", "bytes", "events_lost", "lagged_frames",
        "unexplained_holes", "order_violations", "cpu_s")}
    failures: dict[str, int] = {}
    for r in results:
        for reason, count in r["failures"].items():
            failures[reason] = failures.get(reason, 0) + count
    latency, arrived, heartbeats = array.array("q"), array.array("q"), array.array("d")
    for r in results:
        latency.frombytes(r["latency_us"])
        arrived.frombytes(r["arrived_ms"])
        heartbeats.frombytes(r["heartbeat_s"])
    window = args.duration
    report = {
        "label": args.label, "dialect": args.dialect, "watchers": args.watchers, "procs": args.procs,
        "bearer": bearer.from_args(args).mode,
        "opened": total["opened"], "failed": total["failed"], "failures": failures,
        "closed_early": total["closed_early"], "ramp_s": round(ramp_s, 2), "window_s": window,
        "window_ends_at": round(end, 3),
        "clients_missing": missing,
        "deliveries": total["deliveries"], "deliveries_per_s": round(total["deliveries"] / window),
        "mib_per_s": round(total["bytes"] / window / 2**20, 2),
        "latency_ms": quantiles(latency, 0.001), "latency_sample_every": args.sample_every,
        "latency_ms_by_second": latency_by_second(latency, arrived, start, end),
        "heartbeat_interval_s": quantiles(heartbeats),
        "events_lost": total["events_lost"], "lagged_frames": total["lagged_frames"],
        "unexplained_holes": total["unexplained_holes"], "order_violations": total["order_violations"],
        "client_cpu_s": round(total["cpu_s"], 2),
        "server_cpu_s": round(server_cpu, 2) if server else None,
        "server_rss_kib_before": rss_before if server else None,
        "server_rss_kib_connected": rss_connected if server else None,
    }
    if args.heartbeat_interval:
        report["heartbeat_jitter_ms"] = quantiles([abs(h - args.heartbeat_interval) for h in heartbeats], 1000)
    return report


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--url", required=True, help="the stream endpoint, e.g. http://127.0.0.1:52222/")
    p.add_argument("--dialect", choices=("murmur", "nchan"), default="murmur")
    p.add_argument("--method", default="murmur.WatchSession", help="murmur dialect: the JSON-RPC method")
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument("--procs", type=int, default=min(2, os.cpu_count() or 1), help="client processes")
    p.add_argument("--duration", type=float, default=10.0, help="measuring window, seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds between the last opening and the window")
    p.add_argument("--ramp-rate", type=float, default=2000.0, help="connections opened per second, in all")
    p.add_argument("--connect-timeout", type=float, default=60.0, help="bound on the whole ramp, seconds")
    p.add_argument("--sample-every", type=int, default=1, help="time one load event in this many")
    p.add_argument("--heartbeat-interval", type=float, default=0.0, help="the server's, to report jitter")
    p.add_argument("--server-pid", type=int, default=0, help="root of the server's process tree")
    p.add_argument("--label", default="")
    p.add_argument("--counts", help="publish the live counts to this file (a parent command's progress reads it)")
    p.add_argument("--metrics-port", type=int, help="the gateway's metrics port: its figures join the progress")
    run_report.add_options(p)
    bearer.add_options(p)
    args = p.parse_args(argv)
    bearer.from_args(args)  # an unusable token option stops here, before any client starts
    args.procs = max(1, min(args.procs, args.watchers))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = run_report.utc_now()
    if args.counts:  # a parent command shows the progress and draws the report
        report = run(args)
    else:
        args.counts = tempfile.mkdtemp(prefix="driver-") + "/counts"
        with monitor.Monitor("driver", quiet=args.quiet, plain_every=args.progress_every) as watching:
            with watching.following(args.label or "server", pid=args.server_pid, metrics_port=args.metrics_port,
                                    counts=args.counts, system="gateway" if args.dialect == "murmur" else "nchan"):
                report = run(args)
        shutil.rmtree(os.path.dirname(args.counts), ignore_errors=True)
        run_report.finish(watching, args, "loadtest.driver", argv, started, report)
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0 if report["opened"] else 1


if __name__ == "__main__":
    sys.exit(main())
