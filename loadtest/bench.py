"""Side-by-side bench: murmur-gateway against nginx + nchan and the naive baseline, one command.

Every run starts one server on loopback, drives it with `loadtest/driver.py` (the same
driver, watcher counts, event size and rate for every system), and stops it; the systems
alternate run by run (the order rotates each repeat), so a neighbour's noise on this shared
machine lands on all of them alike. The systems:

- **gateway**: `python -m gateway`, workers = cores (and once with 1 worker), fed by
  `--sim-load RATE --sim-load-size SIZE`; `/metrics` is scraped for its own heartbeat
  jitter histogram.
- **nchan**: nginx + libnginx-mod-nchan (installed with apt-get when absent), loopback
  only, one worker per core (several share the port with `reuseport`, or connections pile
  onto one worker), `nchan_message_buffer_length 512`, the EventSource subscriber endpoint
  (and `/replay`, which hands a new subscriber the whole buffer: `nchan_subscriber_first_message
  oldest`, for the storm), its `nchan_stub_status` at `/nchan_status`; the publisher below POSTs the gateway's load
  event bytes (`loadtest/wire.py`) at the same rate, numbered so the driver can see a lost message.
- **naive**: `loadtest.naive.py` (Starlette + uvicorn, one process, one
  asyncio.Queue(maxsize=128) a connection).

Pinning and clients (the fair figure on a small machine): `--server-cpus 0` runs every
server process under `taskset -c 0` (nginx's master, so its workers inherit it; the bench
checks each process's affinity before it measures), `--client-cpus 1` the client;
`--nginx-workers N` sets nginx's worker count apart from the gateway's `--workers`. The
client is `loadtest/driver.py` unless `--client CMD` names another that takes the driver's
options and prints its JSON report, e.g. the C reader through `loadtest/csse_client.py`.
Either way a new watcher resumes from the newest id (`Last-Event-ID`) and the window opens
`--warmup` seconds after the last connection, so no connect-time replay counts as live
fan-out (nchan replays nothing to a new subscriber).

Figures: deliveries/s at the small and large watcher counts, latency p50/p99, server
CPU-seconds per million deliveries, RSS per idle watcher (no events flowing), heartbeat
jitter at the large count, 2 workers against 1, and the highest rate each system sustains
at the small count: the rate doubles from `--rate` (`--ladder` steps) until a run loses an
event or delivers under 95% of what was offered (`sustained`). Client and server share the machine:
the client's CPU is reported beside the server's. Prints a markdown table and the ratios;
`--json` keeps every run, `--table FILE` prints a kept file's table again. Progress on stderr
(`loadtest/monitor.py`), `--report DIR` the page with the charts, every system of the run in
them (`loadtest/report.py`). Bounded: every run has a fixed window, and the whole bench a
deadline (`--deadline`).

    python -m loadtest.bench                      # the default bench (about 10 minutes)
    python -m loadtest.bench --duration 3 --large 2000 --idle 2000 --repeats 1   # a quick look
    python -m loadtest.bench --only gateway --only nchan --workers 1 --nginx-workers 1 \
        --server-cpus 0 --client-cpus 1 --procs 1 --client "python -m loadtest.csse_client /tmp/csse"

`--method murgw.WatchOwnTasks` has the gateway's watchers open the stream of their own tasks
(README, "A caller's own tasks") in place of murmur.WatchSession: at the bench's public door
every task is the anonymous caller's, so each watcher gets the same events, walked and joined
by each stream alone where WatchSession's watchers in step share one batch; the two runs'
server CPU per million deliveries is what the filter costs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gateway.bench_surface import WATCH_OWN_TASKS, WATCH_SESSION  # noqa: E402
from loadtest import bearer, monitor, run_report, servers  # noqa: E402
from loadtest.servers import SERVERS, check_pinning, ensure_nchan, ensure_uvicorn, pinned  # noqa: E402

SYSTEMS = ("gateway", "nchan", "naive")


# --- runs ---

def drive(args, server, watchers: int, rate: float, label: str, counts: str) -> dict:
    cmd = shlex.split(args.client) + ["--url", server.url, "--dialect", server.dialect, "--counts", counts,
           "--watchers", str(watchers), "--procs", str(args.procs), "--warmup", str(args.warmup),
           "--duration", str(args.duration if rate else args.idle_duration),
           "--connect-timeout", str(args.connect_timeout),
           "--sample-every", str(max(1, watchers // args.timed_per_event)),
           "--heartbeat-interval", str(args.heartbeat_interval), "--server-pid", str(server.proc.pid),
           "--label", label, *bearer.argv(args)]
    if server.name == "gateway":
        cmd += ["--method", args.method]
    # In a session of its own: a client that overruns is killed with the processes it forked
    # (the driver's clients would outlive their parent, holding their connections).
    client = subprocess.Popen(pinned(cmd, args.client_cpus), cwd=servers.ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = client.communicate(timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(client.pid, signal.SIGKILL)
        client.communicate()
        raise
    if client.returncode != 0 and not stdout.strip():
        raise RuntimeError(f"driver failed on {label}: {stderr[-2000:]}")
    report = orjson.loads(stdout.strip().splitlines()[-1])
    report["rate"] = rate
    return report


def following(watching: monitor.Monitor | None, label: str, server, counts: str | None = None):
    """Sample `server` (and its client's counts) while the block runs, when there is a monitor."""
    if watching is None:
        return contextlib.nullcontext()
    return watching.following(label, pid=server.proc.pid, metrics_port=server.metrics_port,
                              nchan_port=server.port if server.name == "nchan" else None,
                              counts=counts, system=server.name)


def one_run(args, system: str, watchers: int, rate: float, workers: int, label: str,
            watching: monitor.Monitor | None = None) -> dict:
    if system == "nchan" and args.nginx_workers:
        workers = args.nginx_workers
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp, SERVERS[system](args, rate, workers) as server, \
            following(watching, label, server, os.path.join(tmp, "counts")):
        if watching is not None:
            watching.phase("starting", target=watchers)
        time.sleep(0.5)
        check_pinning(server.proc.pid, args.server_cpus)
        report = drive(args, server, watchers, rate, label, os.path.join(tmp, "counts"))
        if system == "gateway" and rate:
            report["server_heartbeat_jitter_p99_ms"] = server.heartbeat_jitter_p99_ms()
    report.update(system=system, workers=workers, method=args.method if system == "gateway" else None)
    if args.quiet:
        return report
    print(f"  {label:<28} opened {report['opened']:>6}  {report['deliveries_per_s']:>9}/s  "
          f"p99 {report['latency_ms'].get('p99', '-')} ms  server cpu {report['server_cpu_s']} s  "
          f"client cpu {report['client_cpu_s']} s  lost {report['events_lost']}", file=sys.stderr, flush=True)
    return report


def plan(args) -> list[tuple[str, int, float, int, str]]:
    """(system, watchers, rate, workers, scenario) for every run, systems rotating each repeat."""
    runs = []
    for repeat in range(args.repeats):
        order = SYSTEMS[repeat % 3:] + SYSTEMS[:repeat % 3]
        for scenario, watchers, rate in (("small", args.small, args.rate), ("large", args.large, args.rate),
                                         ("idle", args.idle, 0.0)):
            if args.scenario and scenario not in args.scenario:
                continue
            for system in order:
                workers = args.nginx_workers if system == "nchan" and args.nginx_workers else args.workers
                runs.append((system, watchers, rate, workers, scenario))
            if scenario == "large" and args.workers > 1:
                runs.append(("gateway", watchers, rate, 1, "large-1worker"))
    return runs


def sustained(report: dict) -> bool:
    """Every watcher opened, nothing lost, no hole, and at least 95% of the offered deliveries
    (a client that cannot see losses, csse on nchan, reports them as None: deliveries decide)."""
    offered = report["watchers"] * report["rate"]
    return (report["opened"] == report["watchers"] and report["events_lost"] in (0, None)
            and report["unexplained_holes"] in (0, None) and report["deliveries_per_s"] >= 0.95 * offered)


def ladder(args, system: str, started: float, watching: monitor.Monitor | None = None) -> list[dict]:
    """The small count at doubling rates, until one is not sustained (or the deadline)."""
    reports = []
    rate = args.rate
    for _ in range(args.ladder):
        rate *= 2
        if time.monotonic() - started > args.deadline:
            break
        label = f"{system} max {args.small}w @{rate:g}/s"
        try:
            report = one_run(args, system, args.small, rate, args.workers, label, watching)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"  {label}: failed: {str(exc)[-300:]}", file=sys.stderr, flush=True)
            break
        report["scenario"] = "max"
        reports.append(report)
        if not sustained(report):
            break
    return reports


def median(reports: list[dict], pick) -> float | None:
    values = [v for v in (pick(r) for r in reports) if v is not None]
    return statistics.median(values) if values else None


def summarise(reports: list[dict], args) -> dict:
    def runs(system, scenario):
        return [r for r in reports if r["system"] == system and r["scenario"] == scenario]

    def cpu_per_million(r):
        return r["server_cpu_s"] / r["deliveries"] * 1e6 if r["deliveries"] else None

    def rss_per_watcher(r):
        return (r["server_rss_kib_connected"] - r["server_rss_kib_before"]) / r["opened"] if r["opened"] else None

    table: dict[str, dict] = {}
    for system in SYSTEMS:
        small, large, idle = runs(system, "small"), runs(system, "large"), runs(system, "idle")
        table[system] = {
            f"watchers opened of {args.small} / {args.large} / {args.idle} (idle)": None,
            f"deliveries/s @ {args.small}": median(small, lambda r: r["deliveries_per_s"]),
            f"deliveries/s @ {args.large}": median(large, lambda r: r["deliveries_per_s"]),
            f"latency p50 ms @ {args.small}": median(small, lambda r: r["latency_ms"].get("p50")),
            f"latency p99 ms @ {args.small}": median(small, lambda r: r["latency_ms"].get("p99")),
            f"latency p50 ms @ {args.large}": median(large, lambda r: r["latency_ms"].get("p50")),
            f"latency p99 ms @ {args.large}": median(large, lambda r: r["latency_ms"].get("p99")),
            f"server CPU s / M deliveries @ {args.small}": median(small, cpu_per_million),
            f"server CPU s / M deliveries @ {args.large}": median(large, cpu_per_million),
            f"client CPU s / window @ {args.large}": median(large, lambda r: r["client_cpu_s"]),
            f"events lost @ {args.large}": median(large, lambda r: r["events_lost"]),
            f"RSS KiB / watcher under load @ {args.small}": median(small, rss_per_watcher),
            f"RSS KiB / idle watcher @ {args.idle}": median(idle, rss_per_watcher),
            f"heartbeat jitter p99 ms @ {args.large} (client)":
                median(large, lambda r: r.get("heartbeat_jitter_ms", {}).get("p99")),
        }
        table[system][f"watchers opened of {args.small} / {args.large} / {args.idle} (idle)"] = " / ".join(
            "–" if median(group, lambda r: r["opened"]) is None else f"{median(group, lambda r: r['opened']):.0f}"
            for group in (small, large, idle))
    for system in SYSTEMS:
        best = max((r for r in runs(system, "small") + runs(system, "max") if sustained(r)),
                   key=lambda r: r["rate"], default=None)
        table[system][f"highest rate sustained @ {args.small} (events/s)"] = best["rate"] if best else None
        table[system][f"deliveries/s at that rate @ {args.small}"] = best["deliveries_per_s"] if best else None
    gateway = table["gateway"]
    gateway[f"heartbeat jitter p99 ms @ {args.large} (server)"] = median(
        runs("gateway", "large"), lambda r: r.get("server_heartbeat_jitter_p99_ms"))
    if args.workers > 1:  # the large count once more with 1 worker (plan)
        one_worker = median(runs("gateway", "large-1worker"), lambda r: r["deliveries_per_s"])
        gateway[f"deliveries/s @ {args.large}, 1 worker"] = one_worker
        two = gateway[f"deliveries/s @ {args.large}"]
        gateway[f"{args.workers} workers / 1 worker"] = two / one_worker if two and one_worker else None
    return table


def markdown(table: dict) -> str:
    def fmt(value):
        if isinstance(value, str):
            return value
        if value is None:
            return "–"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"

    def ratio(a, b):
        return f"{a / b:.2f}×" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "–"

    rows = ["| figure | gateway | nchan | naive | gateway/nchan | gateway/naive |", "|---|---|---|---|---|---|"]
    for figure, value in table["gateway"].items():
        nchan, naive = table["nchan"].get(figure), table["naive"].get(figure)
        rows.append(f"| {figure} | {fmt(value)} | {fmt(nchan)} | {fmt(naive)} | {ratio(value, nchan)} | "
                    f"{ratio(value, naive)} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--small", type=int, default=1000, help="watchers, small run")
    p.add_argument("--large", type=int, default=10000, help="watchers, large run")
    p.add_argument("--idle", type=int, default=10000, help="idle watchers for RSS")
    p.add_argument("--rate", type=float, default=100.0, help="load events a second")
    p.add_argument("--size", type=int, default=300, help="load event text, bytes")
    p.add_argument("--duration", type=float, default=10.0, help="measuring window, seconds")
    p.add_argument("--idle-duration", type=float, default=2.0, help="window of the idle runs, seconds")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ladder", type=int, default=5,
                   help="highest sustained rate: at most this many doublings of --rate (0: skip)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="gateway workers (nginx workers too)")
    p.add_argument("--nginx-workers", type=int, help="nginx worker processes (default: --workers)")
    p.add_argument("--server-cpus", help="run every server under taskset -c LIST, e.g. 0")
    p.add_argument("--client-cpus", help="run the load client under taskset -c LIST, e.g. 1")
    p.add_argument("--client", default=f"{shlex.quote(servers.PYTHON)} -m loadtest.driver",
                   help="the load client: a command taking loadtest/driver.py's options and printing its "
                        "JSON report (default: the driver)")
    p.add_argument("--procs", type=int, default=min(2, os.cpu_count() or 1), help="driver client processes")
    p.add_argument("--heartbeat-interval", type=float, default=2.0)
    p.add_argument("--gateway-args", default="",
                   help="more gateway options, e.g. '--log-level info --access-log off' (they win over bench's)")
    p.add_argument("--timed-per-event", type=int, default=1000,
                   help="latency: time about this many deliveries of each event (one in watchers/N)")
    p.add_argument("--connect-timeout", type=float, default=45.0, help="bound on each ramp, seconds")
    p.add_argument("--run-timeout", type=float, default=180.0)
    p.add_argument("--deadline", type=float, default=1200.0, help="stop starting runs after this many seconds")
    p.add_argument("--only", choices=SYSTEMS, action="append", help="run only these systems")
    p.add_argument("--scenario", choices=("small", "large", "idle"), action="append",
                   help="run only these scenarios (the ladder is --ladder's)")
    p.add_argument("--method", choices=(WATCH_SESSION, WATCH_OWN_TASKS), default=WATCH_SESSION,
                   help="the gateway's watchers' stream: every task, or their own (filtered, no shared batch)")
    p.add_argument("--json", help="write every run's report here (e.g. under loadtest/out/)")
    p.add_argument("--table", help="print the table of a saved --json file (same flags) instead of running")
    run_report.add_options(p)
    bearer.add_options(p)  # sent by the driver to every system (a door from --gateway-args '--config FILE')
    args = p.parse_args(argv)
    if args.table:
        with open(args.table, "rb") as fh:
            print(markdown(summarise(orjson.loads(fh.read()), args)))
        return 0

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the servers inherit it
    if not args.only or "nchan" in args.only:  # only what runs: `--only gateway` installs nothing
        ensure_nchan()
    if not args.only or "naive" in args.only:
        ensure_uvicorn()
    with monitor.Monitor("bench", quiet=args.quiet, plain_every=args.progress_every) as watching:
        started_at, reports = run_report.utc_now(), run_plan(args, watching)
    table = summarise(reports, args)
    run_report.finish(watching, args, "loadtest.bench", argv, started_at, reports, figures(table))
    print(f"\n{started_at}, {os.cpu_count()} cores, {args.rate:g} events/s of "
          f"{args.size} B, window {args.duration:g} s, {args.repeats} repeat(s), medians; "
          f"server cpus {args.server_cpus or 'any'}, client cpus {args.client_cpus or 'any'}, "
          f"client {args.client}, gateway watchers on {args.method}\n")
    print(markdown(table))
    return 0


def figures(table: dict) -> dict:
    """The table as the report's columns and rows (a system's column, a figure's row)."""
    return {"columns": list(SYSTEMS), "rows": [[figure, *(table[system].get(figure) for system in SYSTEMS)]
                                               for figure in table["gateway"]]}


def run_plan(args, watching: monitor.Monitor) -> list[dict]:
    """Every run of the plan, then the ladders, within the deadline."""
    started = time.monotonic()
    reports = []
    for system, watchers, rate, workers, scenario in plan(args):
        if args.only and system not in args.only:
            continue
        if time.monotonic() - started > args.deadline:
            print("deadline reached: remaining runs skipped", file=sys.stderr)
            break
        label = f"{system} {scenario} {watchers}w x{workers}"
        try:
            report = one_run(args, system, watchers, rate, workers, label, watching)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:  # one failed run does not end the bench
            print(f"  {label}: failed: {str(exc)[-300:]}", file=sys.stderr, flush=True)
            continue
        report["scenario"] = scenario
        reports.append(report)
    for system in SYSTEMS:
        if not args.only or system in args.only:
            reports += ladder(args, system, started, watching)
    if args.json:
        with open(args.json, "wb") as fh:
            fh.write(orjson.dumps(reports, option=orjson.OPT_INDENT_2))
    return reports


if __name__ == "__main__":
    sys.exit(main())
