"""The storm of full replays (issue #25), read by the C reader: a full ring, then every watcher
replaying it at once (`loadtest.storm --csse PATH`), and the same against nginx+nchan replaying
its prefilled buffer. Its figures come from the reader's report and the gateway's own metrics
scraped before and after (`scrape`, `histogram_over`: jitter, loop stall, restarts, sends)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request

import orjson

from loadtest import loopback, servers

HISTOGRAMS = {"jitter": "murgw_heartbeat_jitter_seconds_bucket", "stall": "murgw_loop_stall_seconds_bucket"}
# Counters summed over their labels: writes per event is sends / events delivered.
COUNTERS = {"sends": "murgw_sends_total", "delivered": "murgw_events_delivered_total",
            "lost_to_lag": "murgw_events_lost_to_lag_total"}


def scrape(metrics_port: int) -> dict:
    """The gateway's heartbeat jitter and loop stall buckets (cumulative, by bound) and worker
    restarts now."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    found: dict = {name: {} for name in HISTOGRAMS}
    found["restarts"] = 0.0
    found.update(dict.fromkeys(COUNTERS, 0.0))
    for line in text.splitlines():
        for name, series in COUNTERS.items():
            if line.startswith(series):
                found[name] += float(line.rsplit(" ", 1)[1])
        for name, series in HISTOGRAMS.items():
            if line.startswith(series):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                found[name][float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
        if line.startswith("murgw_worker_restarts_total"):
            found["restarts"] = float(line.rsplit(" ", 1)[1])
    return found


def histogram_over(before: dict, after: dict) -> dict:
    """Count, p99 and the largest nonempty bucket (its bound) observed between two scrapes."""
    delta = sorted((bound, after[bound] - before.get(bound, 0)) for bound in after)
    total = delta[-1][1] if delta else 0
    if not total:
        return {"count": 0, "p99_ms": None, "max_bucket_ms": None}
    p99 = next(bound for bound, count in delta if count >= 0.99 * total)
    top = next(bound for bound, count in delta if count >= total)
    return {"count": int(total), "p99_ms": round(p99 * 1000, 1), "max_bucket_ms": round(top * 1000, 1)}


def fill_ring(url: str, frames: int) -> None:
    """Run a `/scenario burst` task of `frames` to its end (SendMessage answers when it is queued;
    the burst writes as fast as it can, and the storm starts only after `settle` seconds)."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "role": "ROLE_USER", "messageId": "msg-storm", "parts": [{"text": f"/scenario burst n={frames}"}]}}})
    request = urllib.request.Request(url, body, {"content-type": "application/json", "a2a-version": "1.0"})
    urllib.request.urlopen(request, timeout=30).read()


def workers_of(supervisor_pid: int) -> list[int]:
    """The gateway's worker processes (their title: `murgw: worker N ...`)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                title = fh.read()
        except OSError:
            continue
        if ppid == supervisor_pid and b"worker" in title:
            found.append(int(name))
    return sorted(found)


def profile(args, supervisor_pid: int) -> subprocess.Popen | None:
    """With --profile PATH: py-spy records the first worker from the storm's start for
    --profile-seconds at 100 Hz, as raw collapsed stacks (summarized by loadtest/spy_summary.py)."""
    if not args.profile:
        return None
    pids = workers_of(supervisor_pid)
    if not pids:
        return None
    spy = os.path.join(os.path.dirname(servers.PYTHON), "py-spy")
    return subprocess.Popen([spy, "record", "-p", str(pids[0]), "-r", "100", "-d", str(args.profile_seconds),
                             "-f", "raw", "-o", args.profile, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def csse_storm(args, metrics_port: int, supervisor_pid: int) -> dict:
    time_wait = loopback.rest()  # the last run's closes gone from the loopback (loopback.py)
    fill_ring(args.url, args.burst)
    time.sleep(args.settle)
    before = scrape(metrics_port)
    replay_from = [] if args.last_event_id == "none" else ["--last-event-id", args.last_event_id]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "csse.json")
        cmd = servers.pinned([args.csse, "-n", str(args.watchers), "--mode", "post", *replay_from,
                            "--connect-concurrency", str(args.connect_concurrency),
                            "--track-ids", "--track-from-open", "--idle-exit", "2",
                            "--connect-timeout", str(args.connect_timeout), "--duration", str(args.live_timeout),
                            "--procs", str(args.procs),
                            "--source-addrs", str(loopback.source_addrs(args.watchers, args.source_addrs)),
                            "--out", out, args.url], args.client_cpus)
        started = time.monotonic()
        spy = profile(args, supervisor_pid)
        subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=args.connect_timeout + args.live_timeout + 120,
                       check=False)
        wall = time.monotonic() - started
        if spy is not None:
            spy.wait(timeout=args.profile_seconds + 60)
        with open(out, "rb") as fh:
            reader = orjson.loads(fh.read())
    after = scrape(metrics_port)
    # Every numbered event a watcher was owed: the 512 of its replay (those the ring overwrote
    # before it reached them are named by lagged frames), and with --rate, the live ones.
    received = reader.get("events_before_go", 0) + reader.get("events_total", 0)
    owed = args.watchers * 512 - reader.get("lagged_missed_total", 0)
    every_replay = (received >= owed and reader.get("gap_frames") == args.watchers
                    and not reader.get("closed_by_server") and not reader.get("errors"))
    # With no live events (--rate 0) the reader stops 2 s after the last event: the last replay's end.
    replayed_by = (reader.get("connect_wall_s", 0)
                   + max(0, reader.get("last_event_ns", 0) - reader.get("t_go_ns", 0)) / 1e9)
    keys = ("closed_by_server", "connect_wall_s", "connect_ms_p99", "events_before_go", "events_total",
            "per_conn_events_min",
            "per_conn_events_max", "stop_reasons", "errors", "ids_span_total", "ids_holes_total",
            "ids_holes_announced", "ids_conns_with_holes", "ids_nonascending", "lagged_frames", "gap_frames",
            "lagged_missed_total", "client_cpu_total_s")
    return {"scenario": "reconnect-storm-full-replay", "watchers": args.watchers, "burst": args.burst,
            "time_wait": time_wait, "every_watcher_replayed": every_replay,
            "time_until_all_replayed_s": round(replayed_by, 2) if every_replay and not args.rate else None,
            "reader_wall_s": round(wall, 2),
            "heartbeat_jitter": histogram_over(before["jitter"], after["jitter"]),
            "loop_stall": histogram_over(before["stall"], after["stall"]),  # the worst pulse: the longest stall
            "worker_restarts": int(after["restarts"] - before["restarts"]),
            "events_lost_to_lag": int(after["lost_to_lag"] - before["lost_to_lag"]),
            "writes_per_event": round((after["sends"] - before["sends"])
                                      / max(1.0, after["delivered"] - before["delivered"]), 4),
            "reader": {key: reader.get(key) for key in keys}}


def csse_nchan_storm(args) -> dict:
    """The C reader against nginx+nchan as the issue's anchor: its subscribers replay the
    channel's buffer (`/replay`, `nchan_subscriber_first_message oldest`), prefilled with 512
    messages of --size bytes, while --rate more are published a second. How long its ramp
    takes, and what each subscriber got (nchan's messages carry no murmur id: counts, not id
    checks)."""
    time_wait = loopback.rest()
    with servers.Nchan(args, args.rate, args.workers, prefill=512) as nchan, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "csse.json")
        cmd = servers.pinned([args.csse, "-n", str(args.watchers), "--mode", "get",
                            "--connect-concurrency", str(args.connect_concurrency), "--idle-exit", "2",
                            "--connect-timeout", str(args.connect_timeout), "--duration", str(args.live_timeout),
                            "--procs", str(args.procs),
                            "--source-addrs", str(loopback.source_addrs(args.watchers, args.source_addrs)),
                            "--out", out, nchan.url.replace("/sub", "/replay")], args.client_cpus)
        subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=args.connect_timeout + args.live_timeout + 120,
                       check=False)
        with open(out, "rb") as fh:
            reader = orjson.loads(fh.read())
    keys = ("closed_by_server", "connect_wall_s", "connect_ms_p99", "events_before_go", "events_total",
            "per_conn_events_min", "per_conn_events_max", "stop_reasons", "errors", "client_cpu_total_s")
    return {"scenario": "nchan-replaying-storm", "watchers": args.watchers, "rate": args.rate, "time_wait": time_wait,
            "reader": {key: reader.get(key) for key in keys}}
