"""What opening a stream costs: N `murmur.WatchSession` openings, the gateway against nginx+nchan.

A reconnect storm after a deploy is where the cost of an opening shows. This bench has the C
reader (csse, built with the tool's build.sh) open `--watchers` streams with
`--connect-concurrency` in flight, against one gateway worker and against one nginx worker with
nchan's EventSource subscriber, each pinned to `--server-cpus`, csse to `--client-cpus`, the
systems alternating over `--repeats` rounds in one run, so their ratio is read within a run
(nchan's own cost moves between sessions). Each run starts once the loopback's TIME_WAIT
sockets from the run before have gone, and csse spreads its connections over its source
addresses as the crowd's reader does (`loopback.rest`, `loopback.source_addrs`). Reported per run:

- `open_s`: csse's connect phase, from its first connect to the last stream's response head;
- `server_cpu_us_per_opening`: the server's process tree's CPU (user + system, /proc) over
  that phase, divided by the streams opened;
- `rss_kib_per_stream`: the tree's RSS once all are open, less its RSS before, per stream;
- `time_wait`: the TIME_WAIT sockets found before it started, and the seconds waited for them.

The gateway runs with the access log at its default (on, at `--log-level info`, to /dev/null),
no load (`--sim-load 0`), and replays nothing unless `--last-event-id 0` is given (then each
opening replays the ring: start it with `--fill` events written first). A summary line gives
the medians and the ratio gateway / nchan.

    python -m loadtest.openings --csse /tmp/csse --watchers 10000 --connect-concurrency 1000 \
        --repeats 3 --server-cpus 0 --client-cpus 1

Progress on stderr while it runs (the watchers open as each server counts them: the gateway's
/metrics, nchan's stub status), `--report DIR` the page with every run's ramp, CPU and memory,
the gateway's and nchan's side by side (`loadtest/monitor.py`, `loadtest/report.py`).

With `--token-modes static,cached-es256,fresh-es256,fresh-rs256,fresh-hs256` the gateway's
door asks for a bearer token, and each mode is a system of its own in the runs (`gateway+MODE`,
alternating as the systems do): a static token, one ES256 JWT on every opening (verified once,
then found among the worker's verified tokens), or a JWT of its own per opening. Those runs
open their streams with `loadtest/opening_tokens.py`'s opener, which gives each its token
(csse's `--header` is one for all); `none`, the default, is the tokenless door csse opens:

    python -m loadtest.openings --systems gateway --token-modes static,cached-es256,fresh-es256,\
        fresh-rs256,fresh-hs256 --watchers 10000 --connect-concurrency 1000 --repeats 3 \
        --server-cpus 0 --client-cpus 1

Bounded: csse (and the opener) by `--connect-timeout` and a hard timeout; every server started
here is stopped by pid at the end of its run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gateway.bench_surface import cpu_seconds, process_tree, rss_kib  # noqa: E402
from loadtest import bench, loopback, monitor, opening_tokens, run_report  # noqa: E402
from loadtest.storm_replay import fill_ring  # noqa: E402

SETTLE_SECONDS = 1.0  # after the port answers: the workers' start-up CPU is not the openings'


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csse", help="the csse binary (for every run but a token mode's)")
    p.add_argument("--watchers", type=int, default=10_000)
    p.add_argument("--connect-concurrency", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--systems", default="gateway,nchan")
    p.add_argument("--server-cpus", default="0")
    p.add_argument("--client-cpus", default="1")
    p.add_argument("--connect-timeout", type=float, default=60.0)
    p.add_argument("--last-event-id", default=None, help="sent on every opening (gateway only)")
    p.add_argument("--fill", type=int, default=0, help="events written before the openings (gateway only)")
    p.add_argument("--gateway-args", default="", help="more gateway options, after ours")
    p.add_argument("--token-modes", default="none",
                   help="the gateway's door, each a system of its own: none (csse opens), or "
                        f"{', '.join(opening_tokens.MODES)} (the opener presents the tokens)")
    p.add_argument("--out", default=None, help="write every run's figures here as JSON")
    run_report.add_options(p)
    args = p.parse_args(argv)
    modes = args.token_modes.split(",")
    for mode in modes:
        if mode != "none" and mode not in opening_tokens.MODES:
            p.error(f"--token-modes: {mode!r} is not one of none, {', '.join(opening_tokens.MODES)}")
    args.labels = [label for system in args.systems.split(",") for label in
                   ([f"{system}+{m}" if m != "none" else system for m in modes] if system == "gateway" else [system])]
    if args.csse is None and any("+" not in label for label in args.labels):
        p.error("--csse is required: a run without a token mode opens its streams with it")
    if modes != ["none"] and (args.fill or args.last_event_id is not None):
        p.error("--token-modes takes neither --fill nor --last-event-id (its openings replay nothing)")
    return args


def server_for(args, system: str, more_args: str = ""):
    ns = types.SimpleNamespace(heartbeat_interval=15.0, size=300, large=args.watchers, idle=0,
                               gateway_args=f"--log-level info {args.gateway_args} {more_args}",
                               server_cpus=args.server_cpus)
    return bench.SERVERS[system](ns, 0.0, 1)


def client_command(args, server, ready: str, tokens: str | None) -> list[str]:
    """csse's command line, or with a token mode's `tokens` file the opener's, which takes csse's."""
    common = ["--connect-concurrency", str(args.connect_concurrency), "--connect-timeout", str(args.connect_timeout),
              "--ready-file", ready, "--duration", "2"]
    if tokens is not None:
        return [sys.executable, "-m", "loadtest.opening_tokens", "--tokens-file", tokens, "-n", str(args.watchers),
                *common, server.url]
    cmd = [args.csse, "-n", str(args.watchers), *common, "--source-addrs", str(loopback.source_addrs(args.watchers))]
    if server.dialect == "murmur":
        cmd += ["--mode", "post"]
        if args.last_event_id is not None:
            cmd += ["--last-event-id", args.last_event_id]
    return [*cmd, server.url]


def one_run(args, label: str, watching: monitor.Monitor, run_label: str) -> dict:
    """One run of `label`: a system, or `gateway+MODE` (its door asking for MODE's tokens)."""
    system, _, mode = label.partition("+")
    with tempfile.TemporaryDirectory(prefix="openings-") as tmp:
        config, tokens = opening_tokens.door(mode, Path(tmp), args.watchers) if mode else (None, None)
        run = _measured(args, system, watching, run_label, tmp, f"--config {config}" if config else "",
                        None if tokens is None else str(tokens))
    return {**run, "system": label}


def _measured(args, system: str, watching: monitor.Monitor, label: str, tmp: str, more_args: str,
              tokens: str | None) -> dict:
    watching.phase("resting", loopback.TIME_WAIT_WAIT_MOST)
    time_wait = loopback.rest()  # the last run's closes gone from the loopback (loopback.py)
    watching.phase("starting", target=args.watchers)
    with server_for(args, system, more_args) as server, bench.following(watching, label, server):
        time.sleep(SETTLE_SECONDS)
        bench.check_pinning(server.proc.pid, args.server_cpus)
        if system == "gateway" and args.fill:
            fill_ring(server.url, args.fill)
            time.sleep(2.0)  # the burst runs to its end before the openings
        family = process_tree(server.proc.pid)
        cpu_before, rss_before = cpu_seconds(family), rss_kib(family)
        ready = os.path.join(tmp, "ready")
        client = subprocess.Popen(bench.pinned(client_command(args, server, ready, tokens), args.client_cpus),
                                  cwd=bench.ROOT if tokens is not None else None,  # -m loadtest.opening_tokens
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        watching.phase("connecting", args.connect_timeout)
        deadline = time.monotonic() + args.connect_timeout + 10
        while not os.path.exists(ready) and client.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        family = process_tree(server.proc.pid)
        cpu_open, rss_open = cpu_seconds(family), rss_kib(family)
        watching.phase("holding", 2)
        out, _ = client.communicate(timeout=args.connect_timeout + 30)
        report = json.loads(out.decode().strip().splitlines()[-1])
    opened = report["conns_opened"]
    return {"system": system, "opened": opened, "open_s": report.get("connect_wall_s"),
            "server_cpu_s": round(cpu_open - cpu_before, 3),
            "server_cpu_us_per_opening": round((cpu_open - cpu_before) / max(opened, 1) * 1e6, 1),
            "rss_kib_per_stream": round((rss_open - rss_before) / max(opened, 1), 2),
            "failed": report["fail_reasons"], "time_wait": time_wait}


def main(argv=None) -> None:
    args = parse_args(argv)
    systems = args.labels
    runs = []
    started = run_report.utc_now()
    with monitor.Monitor("openings", quiet=args.quiet, plain_every=args.progress_every) as watching:
        for repeat in range(args.repeats):
            for system in systems[repeat % len(systems):] + systems[:repeat % len(systems)]:
                run = one_run(args, system, watching, f"{system} #{repeat + 1}")
                runs.append(run)
                print(json.dumps(run), flush=True)
    medians = {s: statistics.median(r["server_cpu_us_per_opening"] for r in runs if r["system"] == s)
               for s in systems}
    summary = {"median_cpu_us_per_opening": medians,
               "median_open_s": {s: statistics.median(r["open_s"] or 0 for r in runs if r["system"] == s)
                                 for s in systems}}
    if "gateway" in medians and medians.get("nchan"):
        summary["gateway_over_nchan"] = round(medians["gateway"] / medians["nchan"], 2)
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"runs": runs, "summary": summary}, fh, indent=1)
    run_report.finish(watching, args, "loadtest.openings", argv, started, {"runs": runs, "summary": summary},
                   figures(runs, summary, systems))


def figures(runs: list[dict], summary: dict, systems: list[str]) -> dict:
    """A column per system: the medians over its runs (the ratio in the gateway's)."""
    def median(system, key):
        values = [r[key] for r in runs if r["system"] == system and r[key] is not None]
        return statistics.median(values) if values else None

    columns = {system: {"runs": sum(1 for r in runs if r["system"] == system),
                        "median opened": median(system, "opened"),
                        "median server CPU µs / opening": median(system, "server_cpu_us_per_opening"),
                        "median open s": median(system, "open_s"),
                        "median RSS KiB / stream": median(system, "rss_kib_per_stream")} for system in systems}
    if "gateway_over_nchan" in summary:
        columns["gateway"]["CPU / opening, gateway / nchan"] = summary["gateway_over_nchan"]
    return run_report.side_by_side(columns)


if __name__ == "__main__":
    main()
