"""100,000 watchers on one box (issue #25): idle, or at one event a second, read by the C reader.

Starts the gateway (`--workers`, `--heartbeat-interval`, `--sim-load --rate`) and quotes its
start-up banner (the `listening` line: capacity and the limit that binds), then has csse
(`--csse PATH`, built with the tool's build.sh) open `--watchers` `murmur.WatchSession` streams
from `--procs` processes over `--source-addrs` loopback source addresses (by default one for
every 4,000 watchers: loadtest/loopback.py; one process holds at most its descriptor limit).
Each server starts once the loopback's TIME_WAIT sockets from the run before have gone
(`loopback.rest`, reported as `time_wait`). After the ramp csse
waits `--settle` seconds, then reads for `--window` seconds: the steady window. Reported:

- connected, refused (503 as csse saw them and as `murgw_requests_refused_total{reason="capacity"}`
  counts them), closed by the server, the ramp (csse's connect phase), worker restarts;
- the heartbeat jitter and the workers' loop stall over the ramp (with the settle), and over the
  steady window only: the gateway's own histogram, scraped at the
  window's start and end, the difference's p99 and largest bucket;
- memory per watcher at the window's start, against before the ramp: RSS and PSS of the server's
  process tree, the kernel's TCP buffers (/proc/net/sockstat) and slab (/proc/meminfo, machine-wide:
  both ends of the loopback);
- with `--rate` > 0: the events csse read in the window (ids checked with `--track-ids`: holes,
  order) and their delivery latency p50/p99/max, from the `--sim-load` frames' ns timestamps,
  over every connection (`--lat-conns 0`).

`--server nchan` runs the same against nginx + nchan (loadtest/servers.py's, `--workers` nginx workers,
its EventSource subscriber, fed `--rate` events a second by its publisher); nchan replays nothing
and numbers nothing, so its connection counts, ramp, CPU, events read and latency compare, not
its ids. `--server gateway,nchan` runs both, one after the other, one JSON line each, and draws
them in the same charts (`--report DIR`). While it runs,
the progress (`loadtest/monitor.py`) reads the watchers open from the server (the gateway's
/metrics, nchan's stub status): csse reports only at its end. Pin as DEVELOPERS.md says:

    python -m loadtest.crowd --csse /tmp/csse --watchers 100000 --workers 6 --procs 6 \
        --heartbeat-interval 5 --server-cpus 0 --client-cpus 1

Bounded: the ramp by `--connect-timeout`, the window by `--window`, csse by a timeout over both;
the server started here is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gateway.bench_surface import cpu_seconds, process_tree  # noqa: E402
from loadtest import loopback, monitor, run_report, servers  # noqa: E402
from loadtest.csse_client import newest_id, wait_ready  # noqa: E402
from loadtest.idle20k import memory_kib, refused_total, slab_kib, tcp_mem_kib  # noqa: E402
from loadtest.storm import StormGateway  # noqa: E402
from loadtest.storm_replay import histogram_over, scrape  # noqa: E402

METHOD = "murmur.WatchSession"


class CrowdGateway(StormGateway):
    """The storm's gateway, logging at info (the start-up banner is an info line) to a file,
    without the access log (a line per opening)."""

    def __init__(self, args):
        super().__init__(args)
        self.cmd += ["--log-level", "info", "--access-log", "off"]  # argparse keeps the last value

    def __enter__(self):
        self.log = (open(self.args.gateway_log, "wb") if self.args.gateway_log
                    else tempfile.NamedTemporaryFile(prefix="crowd-gateway-", suffix=".log"))
        self.proc = subprocess.Popen(servers.pinned(self.cmd, self.args.server_cpus), cwd=servers.ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        servers.wait_for_port(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        servers.stop(self.proc)
        self.log.close()

    def banner(self, timeout: float = 10.0) -> dict | None:
        """The supervisor's `listening` line, as it logged it (it may follow the port's opening)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log.name, "rb") as fh:
                for line in fh:
                    if line.startswith(b"{") and b'"event":"listening"' in line:
                        return orjson.loads(line)
            time.sleep(0.1)
        return None


def csse_command(args, system: str, url: str, ready: str, out: str) -> list[str]:
    cmd = [args.csse, url, "-n", str(args.watchers), "--procs", str(args.procs),
           "--source-addrs", str(loopback.source_addrs(args.watchers, args.source_addrs)),
           "--connect-timeout", str(args.connect_timeout),
           "--go-delay", str(args.settle), "--duration", str(args.window), "--lat-conns", "0",
           "--ready-file", ready, "--out", out]
    if system == "gateway":
        cmd += ["--mode", "post", "--track-ids"]
        if args.rate > 0:  # from the newest event on: no replay of what the ring held before the ramp
            cmd += ["--last-event-id", str(newest_id(url, METHOD))]
    return servers.pinned(cmd, args.client_cpus)


def memory(pids: list[int]) -> dict:
    rss, pss = memory_kib(pids)
    return {"rss": rss, "pss": pss, "tcp": tcp_mem_kib(), "slab": slab_kib()}


def crowd(args, server, system: str, watching: monitor.Monitor) -> dict:
    gateway = system == "gateway"
    time.sleep(1.0)  # the workers' own start-up settles
    before = memory(process_tree(server.proc.pid))
    refused_before = refused_total(server.metrics_port) if gateway else 0
    ramp_start = scrape(server.metrics_port) if gateway else None
    with tempfile.TemporaryDirectory(prefix="crowd-") as tmp:
        ready, out = os.path.join(tmp, "ready.json"), os.path.join(tmp, "csse.json")
        proc = subprocess.Popen(csse_command(args, system, server.url, ready, out), stdout=subprocess.DEVNULL)
        try:
            watching.phase("connecting", args.connect_timeout, args.watchers)
            go = wait_ready(ready, proc, args.connect_timeout + args.settle + 60)
            watching.phase("settling", max(0.0, go["t_go_ns"] / 1e9 - time.time()))
            window_start = scrape(server.metrics_port) if gateway else None
            connected = memory(process_tree(server.proc.pid))
            cpu = cpu_seconds(process_tree(server.proc.pid))
            time.sleep(max(0.0, go["t_go_ns"] / 1e9 - time.time()))
            watching.phase("window", args.window)
            time.sleep(max(0.0, go["t_go_ns"] / 1e9 + args.window - 1.0 - time.time()))
            window_end = scrape(server.metrics_port) if gateway else None
            cpu = cpu_seconds(process_tree(server.proc.pid)) - cpu
            proc.wait(timeout=args.window + 90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with open(out, "rb") as fh:
            reader = orjson.loads(fh.read())
    each = max(1, go["connected"])
    report = {
        "server": system, "watchers": args.watchers, "connected": go["connected"],
        "opened": reader.get("conns_opened"), "failed": reader.get("conns_failed"),
        "failures": reader.get("fail_reasons", {}), "refused": reader.get("fail_reasons", {}).get("http 503", 0),
        "closed_by_server": reader.get("closed_by_server"), "ramp_s": round(go["connect_wall_s"], 1),
        "window_s": reader.get("window_s"), "server_cpu_window_s": round(cpu, 2),
        "per_watcher_kib": {part: round((connected[part] - before[part]) / each, 2) for part in before},
        "server_rss_mib": round(connected["rss"] / 1024, 1), "errors": reader.get("errors", []),
        "heartbeats_read": reader.get("heartbeats"),
    }
    if gateway:
        assert ramp_start is not None and window_start is not None and window_end is not None  # scraped: a gateway
        report.update({
            "refused_counted": refused_total(server.metrics_port) - refused_before,
            "heartbeat_jitter_steady": histogram_over(window_start["jitter"], window_end["jitter"]),
            "loop_stall_steady": histogram_over(window_start["stall"], window_end["stall"]),
            "heartbeat_jitter_ramp": histogram_over(ramp_start["jitter"], window_start["jitter"]),
            "loop_stall_ramp": histogram_over(ramp_start["stall"], window_start["stall"]),
            "worker_restarts_ramp": int(window_start["restarts"]),
            "worker_restarts": int(window_end["restarts"]),
        })
    if args.rate > 0:  # nchan's publisher posts the same load event (servers.Publisher): its timestamp too
        report.update({
            "events_read": reader.get("events_total"),
            "per_conn_events_min": reader.get("per_conn_events_min"),
            "per_conn_events_max": reader.get("per_conn_events_max"),
            "latency_ms": {"samples": reader.get("latency_samples"), "p50": reader.get("lat_ms_p50"),
                           "p99": reader.get("lat_ms_p99"), "max": reader.get("lat_ms_max")},
        })
    if gateway and args.rate > 0:  # only the gateway numbers its events
        report.update({
            "ids_holes": reader.get("ids_holes_total"), "ids_nonascending": reader.get("ids_nonascending"),
            "lagged_frames": reader.get("lagged_frames"),
        })
    return report


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--csse", required=True, help="the C reader's binary")
    p.add_argument("--server", default="gateway", type=lambda text: text.split(","),
                   help="gateway, nchan, or both in the order given: gateway,nchan")
    p.add_argument("--watchers", type=int, default=100000)
    p.add_argument("--workers", type=int, default=6, help="gateway workers, or nginx workers")
    p.add_argument("--procs", type=int, default=6, help="csse processes")
    p.add_argument("--source-addrs", type=int,
                   help="csse source addresses 127.0.0.1..K (default: one for every 4,000 watchers)")
    p.add_argument("--heartbeat-interval", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=0.0, help="gateway --sim-load events a second")
    p.add_argument("--settle", type=float, default=10.0, help="seconds after the ramp before the window")
    p.add_argument("--window", type=float, default=60.0, help="the steady window, seconds")
    p.add_argument("--connect-timeout", type=float, default=600.0, help="bound on the ramp, seconds")
    p.add_argument("--gateway-arg", action="append", default=[], help="one more gateway argument")
    p.add_argument("--gateway-log", help="keep the gateway's log here (default: a temporary file)")
    p.add_argument("--server-cpus", help="taskset -c list for the server")
    p.add_argument("--client-cpus", help="taskset -c list for csse")
    run_report.add_options(p)
    args = p.parse_args(argv)
    if not args.server or set(args.server) - {"gateway", "nchan"}:
        p.error("--server: gateway, nchan, or gateway,nchan")
    args.size = 0  # --sim-load-size, and servers.Nchan's publisher payload (the smallest load event)
    return args


def one_server(args, system: str, watching: monitor.Monitor) -> dict:
    watching.phase("resting", loopback.TIME_WAIT_WAIT_MOST)
    time_wait = loopback.rest()
    started = run_report.utc_now()
    load_before = os.getloadavg()
    watching.phase("starting", target=args.watchers)
    if system == "gateway":
        with CrowdGateway(args) as server, watching.following(
                "gateway", pid=server.proc.pid, metrics_port=server.metrics_port):
            report = {"banner": server.banner(), **crowd(args, server, system, watching)}
    else:
        with servers.Nchan(args, args.rate, args.workers) as server, watching.following(
                "nchan", pid=server.proc.pid, nchan_port=server.port):
            report = crowd(args, server, system, watching)
    return {"started": started, "loadavg_before": [round(x, 2) for x in load_before], "time_wait": time_wait,
            **report}


def main(argv=None) -> int:
    args = parse_args(argv)
    started = run_report.utc_now()
    reports = {}
    with monitor.Monitor("crowd", quiet=args.quiet, plain_every=args.progress_every) as watching:
        for system in args.server:
            reports[system] = one_server(args, system, watching)
            sys.stdout.write(orjson.dumps(reports[system]).decode() + "\n")
    result = reports[args.server[0]] if len(reports) == 1 else reports
    figures = None
    if len(reports) > 1:
        figures = run_report.side_by_side(reports)
    run_report.finish(watching, args, "loadtest.crowd", argv, started, result, figures)
    return 0 if all(report["connected"] == args.watchers for report in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
