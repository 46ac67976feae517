"""Reconnect storm (issue #10, scenario 5): N watchers reconnect at once with Last-Event-ID.

Starts the gateway (`python -m gateway --sim-load RATE`, as the bench does) unless `--url`
names one, lets `--events-before` events accumulate in the 512-event replay buffer, then
every client process (`--procs`) opens its share of `--watchers` connections at the same
instant, with no ramp and no cap on handshakes in flight. Each connection sends its own
`Last-Event-ID`, drawn between 1 and `--max-back` events behind the newest id (so inside the
buffer), and the driver's checks (`loadtest/watcher.py`'s `Watcher`) hold it to an exact
replay: its first id must be Last-Event-ID + 1, ids strictly ascending, and a hole only where
a `lagged` or `gap` frame explains it. After every connection is live the storm is held
`--hold` seconds, so the replay is also seen to join the live stream without a hole.

Prints one JSON line: opened and failed (with the reasons: connect/head timeout, refused,
reset, HTTP status), time until all live (from the first connection's connect to the last
connection's first replayed event), p50/p99/max time to first event and to the response head,
exactness figures, client and server CPU, how the workers split the connections (`ss`), and
the kernel's listen-queue counters (`nstat`) before and after.

    python -m loadtest.storm --watchers 5000 --workers 2 --rate 10

`--peer nchan` runs the same storm against nginx+nchan afterwards, in the same report: its
buffer prefilled with `--events-before` messages, every watcher replaying it whole from its
`/replay` location (`nchan_subscriber_first_message oldest`; nchan cannot resume by number),
its ids checked by the publisher's sequence numbers. While the storm runs, the progress shows
the watchers open and those whose replay is complete (the clients' own counts); `--report DIR`
draws them against time, with the events lost to lag and the gateway's heartbeat jitter.

With `--csse PATH` the storm is the issue #25 one instead: a full ring from a
`/scenario burst n=--burst` task, then `--watchers` streams opened at once by the C reader
(`PATH`, built from the csse tool with its build.sh) with `Last-Event-ID: 0`, ids checked
from each connection's first byte (`--track-from-open`), for `--live-timeout` seconds, or with `--rate 0` until no event
came for 2 s. It reports the time until every watcher had its replay (with `--rate 0`: the last
replayed event's arrival, from the storm's start), the
reader's id checks, and from the gateway's own metrics over the storm: the heartbeat jitter
p99 and largest bucket (its histogram), the longest loop stall the workers measured (the
largest bucket of `loop_stall_seconds`), and the workers the supervisor replaced. Pin with
`--server-cpus 0 --client-cpus 1`:

    python -m loadtest.storm --csse /tmp/csse --watchers 10000 --workers 2 --rate 10 --size 300 \
        --server-cpus 0 --client-cpus 1

Bounded: the openings by `--connect-timeout`, the wait for first events by `--live-timeout`,
every pipe read by a timeout; the gateway (started here) is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
from urllib.parse import urlsplit

import orjson
import uvloop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gateway.bench_surface import cpu_seconds, process_tree  # noqa: E402
from loadtest import bearer, monitor, run_report, servers  # noqa: E402
from loadtest.counts import Counts, keep_published  # noqa: E402
from loadtest.driver import _own_cpu, quantiles, raise_nofile  # noqa: E402
from loadtest.listen_queue import QueueSampler, connections_by_process, nstat, sysctls  # noqa: E402
from loadtest.storm_replay import csse_nchan_storm, csse_storm  # noqa: E402
from loadtest.watcher import Tally, Watcher, build_request, open_watcher  # noqa: E402

METHOD = "murmur.WatchSession"


# --- one client process ---

async def storm_client(args, share: int, conn, seed: int, slot: int) -> None:
    loop = asyncio.get_running_loop()
    parts = urlsplit(args.url)
    host, port = parts.hostname, parts.port or 80
    tally = Tally(0)  # counts deliveries from the storm's start, times none: a replayed event's age is no latency
    rng = random.Random(seed)
    dialect = args.dialect
    counts = Counts(args.counts)
    door = bearer.from_args(args)
    first_user = slot * (args.watchers // args.procs + 2)  # the probe, then each watcher: a user of its own

    # The probe replays the buffer and stays open, so `tally.newest_id` follows the head.
    probe = Watcher(tally, build_request(args.url, dialect, METHOD, 0, door.header(first_user)), dialect)
    failure = await open_watcher(probe, host, port, loop.time() + 30)
    ready_by = loop.time() + args.events_before / max(args.rate, 0.1) + 30
    while failure is None and tally.newest_id < args.events_before and loop.time() < ready_by:
        await asyncio.sleep(0.05)
    conn.send(("ready", tally.newest_id, failure))
    start_at = await loop.run_in_executor(None, conn.recv)
    if start_at is None:
        probe.close()
        return
    await asyncio.sleep(max(0.0, start_at - time.time()))

    cpu_before = _own_cpu()
    newest = tally.newest_id
    deadline = loop.time() + args.connect_timeout
    watchers: list[Watcher] = []  # the opened ones
    tried: list[Watcher] = []
    replaying: list[Watcher] = []  # opened, replay not yet complete (up to the newest id at the start)
    done = [0]

    def replayed() -> int:
        """Watchers that have received every event up to the newest at the storm's start."""
        still = [w for w in replaying if w.last < newest]
        done[0] += len(replaying) - len(still)
        replaying[:] = still
        return done[0]

    tally.measuring = True
    publishing = loop.create_task(keep_published(counts, slot, tally, replayed))

    async def open_one(watcher: Watcher) -> None:
        watcher.started_at = time.monotonic()
        failure = await open_watcher(watcher, host, port, deadline)
        if failure is not None:
            tally.fail(failure)
            return
        watcher.head_at = time.monotonic()
        tally.opened += 1
        watchers.append(watcher)
        replaying.append(watcher)

    openings = []
    for user in range(first_user + 1, first_user + 1 + share):  # every opening starts now: no ramp, no gate
        # nchan: its /replay location hands each subscriber the whole buffer (it cannot resume by number)
        resume_from = max(0, newest - rng.randint(1, args.max_back)) if dialect == "murmur" else 0
        request = build_request(args.url, dialect, METHOD, resume_from, door.header(user))
        watcher = Watcher(tally, request, dialect, resume_from)
        watcher.started_at = watcher.head_at = 0.0
        tried.append(watcher)
        openings.append(loop.create_task(open_one(watcher)))
    _, hanging = await asyncio.wait(openings, timeout=args.connect_timeout + 5)
    for opening in hanging:
        opening.cancel()
    if hanging:
        tally.fail("connect deadline", len(hanging))
    live_by = loop.time() + args.live_timeout
    # live, and replayed up to the newest event at the start, before the hold: the counts'
    # `replayed` is final then, however slowly a loaded box delivered the replays
    while any(not w.first_id_at or w.last < newest for w in watchers) and loop.time() < live_by:
        await asyncio.sleep(0.05)
    storm_cpu = _own_cpu() - cpu_before
    conn.send(("live",))

    await loop.run_in_executor(None, conn.recv)  # the parent's "close", after the hold
    publishing.cancel()
    counts.publish(slot, tally, replayed())
    for watcher in [probe, *watchers]:
        watcher.close()
    live = [w for w in watchers if w.first_id_at]
    conn.send({
        "opened": tally.opened, "failed": tally.failed, "failures": tally.failures,
        "newest_at_start": newest,
        "first_start": min((w.started_at for w in tried if w.started_at), default=None),
        "last_live": max((w.first_id_at for w in live), default=None),
        "first_event_s": [w.first_id_at - w.started_at for w in live],
        "head_s": [w.head_at - w.started_at for w in watchers],
        "connect_s": [w.connected_at - w.started_at for w in tried if w.connected_at],
        "not_live": len(watchers) - len(live),
        "gap_frames": sum(w.gap_frames for w in watchers),
        "lagged_connections": sum(1 for w in watchers if w.missed),
        "events_missed": sum(w.missed for w in watchers),
        "unexplained_holes": tally.unexplained_holes, "order_violations": tally.order_violations,
        "closed_early": tally.closed_early, "client_cpu_s": storm_cpu,
    })


def client_process(args, share: int, conn, seed: int, slot: int) -> None:
    uvloop.run(storm_client(args, share, conn, seed, slot))


def _receive(pipe, timeout: float):
    if not pipe.poll(timeout):
        raise TimeoutError("a client process did not answer in time")
    return pipe.recv()


def storm(args, server_pid: int = 0) -> dict:
    """Run the storm against args.url; the report (one dict). The clients' counts go to
    args.counts (the progress and the report read them)."""
    raise_nofile(args.watchers // args.procs + 512)
    ctx = multiprocessing.get_context("fork")
    shares = [args.watchers // args.procs + (i < args.watchers % args.procs) for i in range(args.procs)]
    counts = Counts(args.counts, slots=len(shares))
    counts.set_phase("starting", target=args.watchers)
    pipes, procs = [], []
    for index, share in enumerate(shares):
        parent_end, child_end = ctx.Pipe()
        proc = ctx.Process(target=client_process, args=(args, share, child_end, args.seed + index, index),
                           daemon=True)
        proc.start()
        pipes.append(parent_end)
        procs.append(proc)
    try:
        ready = [_receive(pipe, args.events_before / max(args.rate, 0.1) + 90) for pipe in pipes]
        problems = [failure for _, _, failure in ready if failure]
        if problems:
            for pipe in pipes:
                pipe.send(None)
            raise RuntimeError(f"a probe connection failed: {problems}")
        server = process_tree(server_pid) if server_pid else []
        counters_before = nstat()
        cpu_before = cpu_seconds(server)
        load_before = os.getloadavg()
        port = urlsplit(args.url).port or 80
        sampler = QueueSampler(port)
        start_at = time.time() + 0.5
        for pipe in pipes:
            pipe.send(start_at)
        time.sleep(max(0.0, start_at - time.time()))
        counts.set_phase("connecting", args.connect_timeout)
        sampler.start()
        for pipe in pipes:
            _receive(pipe, args.connect_timeout + args.live_timeout + 60)
        storm_s = time.time() - start_at
        counts.set_phase("holding", args.hold)
        queue = sampler.report()
        server_cpu = cpu_seconds(process_tree(server_pid) if server_pid else []) - cpu_before
        counters_after = nstat()
        split = connections_by_process(port)
        time.sleep(args.hold)
        counts.set_phase("closing")
        for pipe in pipes:
            pipe.send("close")
        results = [_receive(pipe, 120) for pipe in pipes]
    finally:
        counts.set_phase("done")
        counts.close()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()

    failures: dict[str, int] = {}
    for r in results:
        for reason, count in r["failures"].items():
            failures[reason] = failures.get(reason, 0) + count
    total = {key: sum(r[key] for r in results) for key in (
        "opened", "failed", "not_live", "gap_frames", "lagged_connections", "events_missed",
        "unexplained_holes", "order_violations", "closed_early", "client_cpu_s")}
    first_event = [s for r in results for s in r["first_event_s"]]
    heads = [s for r in results for s in r["head_s"]]
    connects = [s for r in results for s in r["connect_s"]]
    starts = [r["first_start"] for r in results if r["first_start"] is not None]
    lives = [r["last_live"] for r in results if r["last_live"] is not None]
    all_live = total["opened"] == args.watchers and total["not_live"] == 0
    return {
        "scenario": "reconnect-storm", "watchers": args.watchers, "procs": args.procs,
        "opened": total["opened"], "failed": total["failed"], "failures": failures,
        "all_live": all_live,
        "time_until_all_live_s": round(max(lives) - min(starts), 3) if all_live else None,
        "time_until_last_live_s": round(max(lives) - min(starts), 3) if lives and starts else None,
        "first_event_s": quantiles(first_event), "head_s": quantiles(heads),
        "connect_s": quantiles(connects),
        # a SYN the full accept queue dropped is sent again 1 s later (then 3 s, 7 s, ...)
        "connects_over_1s": sum(1 for s in connects if s >= 0.9),
        "not_live": total["not_live"], "closed_early": total["closed_early"],
        "exact": total["unexplained_holes"] == 0 and total["order_violations"] == 0,
        "unexplained_holes": total["unexplained_holes"], "order_violations": total["order_violations"],
        "gap_frames": total["gap_frames"], "lagged_connections": total["lagged_connections"],
        "events_missed": total["events_missed"],
        "newest_id_at_start": max(r["newest_at_start"] for r in results), "max_back": args.max_back,
        "storm_wall_s": round(storm_s, 2), "client_cpu_s": round(total["client_cpu_s"], 2),
        "server_cpu_s": round(server_cpu, 2) if server_pid else None,
        "connections_by_pid": split, "accept_queue": queue,
        "loadavg_before": [round(x, 2) for x in load_before],
        "nstat_before": counters_before,
        "nstat_delta": {k: counters_after.get(k, 0) - counters_before.get(k, 0) for k in counters_before},
    }


class StormGateway(servers.ServerProcess):
    """The gateway under test, started like the bench's, with the storm's options."""

    def __init__(self, args):
        self.args = args
        self.port, self.metrics_port = servers.free_port(), servers.free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.cmd = [servers.PYTHON, "-m", "gateway", "--bind", f"127.0.0.1:{self.port}",
                    "--workers", str(args.workers), "--metrics-bind", f"127.0.0.1:{self.metrics_port}",
                    "--log-level", "warning",
                    "--heartbeat-interval", str(args.heartbeat_interval),
                    "--sim-load", str(args.rate), "--sim-load-size", str(args.size), *args.gateway_arg]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--watchers", type=int, default=5000, help="connections opened at once, in all")
    p.add_argument("--procs", type=int, default=min(2, os.cpu_count() or 1), help="client processes")
    p.add_argument("--url", help="drive this gateway instead of starting one")
    p.add_argument("--server-pid", type=int, default=0, help="with --url: root of the server's process tree")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="gateway workers (started here)")
    p.add_argument("--rate", type=float, default=10.0, help="--sim-load events a second")
    p.add_argument("--size", type=int, default=0, help="--sim-load-size bytes")
    p.add_argument("--heartbeat-interval", type=float, default=15.0)
    p.add_argument("--gateway-arg", action="append", default=[],
                   help="one more gateway argument, e.g. --gateway-arg=--max-connections=2000")
    p.add_argument("--events-before", type=int, default=300, help="events in the buffer before the storm")
    p.add_argument("--max-back", type=int, default=256,
                   help="each Last-Event-ID is 1..this many ids behind the newest (the buffer holds 512)")
    p.add_argument("--connect-timeout", type=float, default=60.0,
                   help="bound on every opening (TCP connect and response head), from the storm's start")
    p.add_argument("--live-timeout", type=float, default=30.0, help="then, bound on the wait for first events")
    p.add_argument("--hold", type=float, default=3.0, help="seconds every connection stays open once live")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--csse", help="the C reader's binary: run the full-replay storm with it (see above)")
    p.add_argument("--burst", type=int, default=700, help="with --csse: the burst task that fills the ring")
    p.add_argument("--settle", type=float, default=3.0, help="with --csse: seconds for the burst to finish")
    p.add_argument("--server-cpus", help="taskset -c list for the gateway (started here)")
    p.add_argument("--client-cpus", help="taskset -c list for the C reader")
    p.add_argument("--connect-concurrency", type=int, default=200,
                   help="with --csse: connects in flight per client process (csse's own default 200)")
    p.add_argument("--last-event-id", default="0",
                   help="with --csse: the header each watcher sends; 'none': no header (a watcher replays from 0)")
    p.add_argument("--server", choices=("gateway", "nchan"), default="gateway",
                   help="with --csse: nchan replaying its prefilled 512-message buffer instead (csse_nchan_storm)")
    p.add_argument("--profile", help="with --csse: py-spy's raw stacks of the first worker, written here")
    p.add_argument("--profile-seconds", type=int, default=30)
    p.add_argument("--source-addrs", type=int,
                   help="with --csse: spread the streams over 127.0.0.1..K (default: one for every 4,000)")
    p.add_argument("--peer", choices=("nchan",), action="append", default=[],
                   help="the same storm against nginx+nchan afterwards (--workers nginx workers, its buffer "
                        "prefilled with --events-before messages, each watcher replaying it whole: "
                        "nchan_subscriber_first_message oldest); not with --csse or --url")
    run_report.add_options(p)
    bearer.add_options(p)
    args = p.parse_args(argv)
    bearer.from_args(args)  # an unusable token option stops here
    if args.peer and (args.csse or args.url):
        p.error("--peer runs with the storm's own gateway and Python clients (no --csse, no --url)")
    args.dialect = "murmur"
    args.procs = max(1, min(args.procs, args.watchers))
    args.max_back = max(1, args.max_back)
    return args


def nchan_storm(args, watching: monitor.Monitor, counts: str) -> dict:
    """The same storm against nginx+nchan: its buffer prefilled, every watcher replaying it."""
    peer = argparse.Namespace(**{**vars(args), "dialect": "nchan", "counts": counts})
    with servers.Nchan(args, args.rate, args.workers, prefill=args.events_before) as server, \
            watching.following("nchan storm", pid=server.proc.pid, nchan_port=server.port, counts=counts):
        peer.url = f"http://127.0.0.1:{server.port}/replay"
        return {"server": "nchan", **storm(peer, server.proc.pid)}


def main(argv=None) -> int:
    args = parse_args(argv)
    started = run_report.utc_now()
    tmp = tempfile.mkdtemp(prefix="storm-")
    args.counts = os.path.join(tmp, "counts")
    try:
        with monitor.Monitor("storm", quiet=args.quiet, plain_every=args.progress_every) as watching:
            watching.phase("starting", target=args.watchers)
            if args.server == "nchan":
                report = csse_nchan_storm(args)
            elif args.url:
                with watching.following("gateway storm", pid=args.server_pid, counts=args.counts):
                    report = storm(args, args.server_pid)
            else:
                with StormGateway(args) as gateway, watching.following(
                        "gateway storm", pid=gateway.proc.pid, metrics_port=gateway.metrics_port,
                        counts=None if args.csse else args.counts, system="gateway"):
                    args.url = gateway.url
                    if args.csse:
                        watching.phase("replaying", args.connect_timeout + args.live_timeout)
                        report = csse_storm(args, gateway.metrics_port, gateway.proc.pid)
                    else:
                        report = storm(args, gateway.proc.pid)
            peers = {name: nchan_storm(args, watching, os.path.join(tmp, f"counts-{name}")) for name in args.peer}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"started": started, "cores": os.cpu_count(), "sysctl": sysctls(), **report}
    if peers:
        report["peers"] = peers
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    figures = None
    if peers:
        figures = run_report.side_by_side({"gateway": {k: v for k, v in report.items() if k != "peers"}, **peers})
    run_report.finish(watching, args, "loadtest.storm", argv, started, report, figures, storm=True)
    if args.server == "nchan":
        return 0
    if args.csse:
        reader = report["reader"]
        return 0 if report["every_watcher_replayed"] and not reader["ids_nonascending"] else 1
    return 0 if report["all_live"] and report["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
