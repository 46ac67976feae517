"""Chosen rows of the side-by-side bench, against any checkout of the gateway.

`loadtest/bench.py` runs its whole plan (small, large, idle, the ladder); a before/after
comparison wants a few rows, in one run, nchan beside them, and sometimes an older commit of
the gateway (`git worktree add /tmp/old <commit>` with its own venv):

    python -m loadtest.rows --rows gateway:1000:100,nchan:1000:100 --root /tmp/old \\
        --python /tmp/old/.venv/bin/python --out before.json -- --workers 1 --server-cpus 0 ...

Everything after `--` is bench.py's own flags (the client and the gateway run in --root: give
--client an absolute path). Each row is SYSTEM:WATCHERS:RATE; the report
is bench.py's per run, written to --out after each row, and one line per row on stdout.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadtest import bench, servers  # noqa: E402


def bench_args(argv: list[str]) -> argparse.Namespace:
    """bench.py's flags parsed as bench.py parses them (its plan is not run)."""
    seen: list[argparse.Namespace] = []

    def capture(args):
        seen.append(args)
        raise StopIteration

    plan, bench.plan = bench.plan, capture
    try:
        bench.main(argv)
    except StopIteration:
        pass
    finally:
        bench.plan = plan
    return seen[0]


def line(report: dict) -> str:
    deliveries = report["deliveries"]
    cpu_us = report["server_cpu_s"] / deliveries * 1e6 if deliveries else None
    rss = ((report["server_rss_kib_connected"] - report["server_rss_kib_before"]) / report["opened"]
           if report["opened"] else None)
    latency = report["latency_ms"]
    return (f"{report['system']:8} {report['watchers']}w @{report['rate']:g}/s  "
            f"delivered/s {report['deliveries_per_s']}  server CPU µs/delivery {cpu_us and round(cpu_us, 2)}  "
            f"p50 {latency.get('p50')} p99 {latency.get('p99')} ms  lost {report['events_lost']}  "
            f"opened {report['opened']}  RSS KiB/watcher {rss and round(rss, 2)}  "
            f"client CPU {report['client_cpu_s']} s")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", required=True, help="SYSTEM:WATCHERS:RATE,...")
    p.add_argument("--root", default=servers.ROOT, help="the checkout whose gateway runs")
    p.add_argument("--python", default=servers.PYTHON, help="the interpreter that runs it")
    p.add_argument("--out", help="write the reports here (JSON)")
    own = p.parse_args(argv[:split])
    args = bench_args(argv[split + 1:])
    servers.ROOT, servers.PYTHON = own.root, own.python
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    reports = []
    for row in own.rows.split(","):
        system, watchers, rate = row.split(":")
        label = f"{system} {watchers}w @{rate}/s"
        try:
            report = bench.one_run(args, system, int(watchers), float(rate), args.workers, label)
        except Exception as exc:  # noqa: BLE001 - one failed row does not end the others
            print(f"{label}: failed: {str(exc)[-300:]}", file=sys.stderr, flush=True)
            continue
        reports.append(report)
        print(line(report), flush=True)
        if own.out:
            with open(own.out, "wb") as fh:
                fh.write(orjson.dumps(reports, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
