"""What one watcher costs a worker, part by part: RSS, tracemalloc and an object census.

Measure before cutting. Two scenarios, each run twice against a real gateway (`--workers 1`):
once plain, for RSS (VmRSS, anonymous RSS), glibc's heap (`mallinfo2`: in use, and free but
kept) and a census of the gc-tracked objects by type (coroutines by name: the frames a stream
keeps suspended); once under `PYTHONTRACEMALLOC`, for the bytes each source line and each
library allocated (tracemalloc inflates RSS, so RSS comes from the plain run; `--no-trace`
skips it).

- **idle**: `--idle` watchers (default 2,000) open, no load, no heartbeat due in the window;
- **load**: `--load` watchers (default 1,000) reading `--rate` events/s of `--size` B (the
  gateway's `--sim-load`), measured after `--settle` seconds of load. Read them with the C
  reader (`--csse BINARY`) where the machine is small: a Python reader that falls behind
  fills the worker's write buffers, and the figure then measures the client.

Each figure is (after - before) / watchers, "before" being the same worker with no watcher.
The worker dumps itself when asked (loadtest/memparts_gateway.py: a `sitecustomize` that
writes the census and RSS and, if tracing, a tracemalloc snapshot). Watchers resume from the
newest id (Last-Event-ID), so a new one is not handed the whole replay buffer; they are raw
sockets in a forked client process that reads and discards (or the C reader).

    python -m loadtest.memparts                    # both scenarios, a few minutes
    python -m loadtest.memparts --idle 10000 --only idle --json /tmp/mem.json
    python -m loadtest.memparts --csse /tmp/csse   # the load scenario read by the C reader
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
import urllib.request

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gateway.bench_surface import RING_SLOTS  # noqa: E402  (the events each worker's window keeps)
from loadtest.memparts_gateway import TracedGateway  # noqa: E402
from loadtest.servers import wait_for_port  # noqa: E402
from loadtest.csse_client import newest_id  # noqa: E402
from loadtest.driver import raise_nofile  # noqa: E402
from loadtest.watcher import build_request  # noqa: E402

# first match wins: the gateway's own adapter before hypercorn's package
PARTS = (("gateway.worker.delivery.stream", "gateway/worker/delivery/stream.py"),
         ("gateway.worker.delivery.hub", "gateway/worker/delivery/hub.py"),
         ("gateway.worker.delivery.drivers", "gateway/worker/delivery/drivers.py"),
         ("gateway.worker.hypercorn", "gateway/worker/hypercorn/"), ("uvloop", "/uvloop/"), ("h11", "/h11/"),
         ("hypercorn", "/hypercorn/"), ("starlette", "/starlette/"), ("gateway", "/gateway/"))
STDLIB = re.compile(r"/python3\.\d+/(asyncio|[a-z_]+\.py)")


# --- the client: raw watchers in a forked process ---

async def hold(url: str, count: int, resume_from: int, ready, stop_event) -> None:
    parts = url.split("/")[2].split(":")
    loop = asyncio.get_running_loop()

    class Sink(asyncio.Protocol):
        """Reads and discards; `served` is set at the first bytes (the response head)."""

        def __init__(self):
            self.served = loop.create_future()

        def data_received(self, data):
            if not self.served.done():
                self.served.set_result(None)

    request = build_request(url, "murmur", "murmur.WatchSession", resume_from)
    transports = []
    gate = asyncio.Semaphore(256)

    async def one():
        async with gate:
            transport, sink = await loop.create_connection(Sink, parts[0], int(parts[1]))
            transport.write(request)
            transports.append(transport)
            await sink.served  # the worker holds this stream now

    await asyncio.gather(*(one() for _ in range(count)))
    ready.set()
    while not stop_event.is_set():
        await asyncio.sleep(0.1)
    for transport in transports:
        transport.abort()


def client(url: str, count: int, resume_from: int, ready, stop_event) -> None:
    import uvloop
    raise_nofile(count + 256)
    uvloop.run(hold(url, count, resume_from, ready, stop_event))


# --- the gateway, dumping itself ---

def wait_served(url: str, timeout: float = 60.0) -> None:
    """The worker answers (the supervisor listens before the worker has started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + ".well-known/agent-card.json", timeout=5).read()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("the worker did not answer in time")


def measure(args, scenario: str, trace: bool) -> dict:
    watchers = args.idle if scenario == "idle" else args.load
    rate = 0.0 if scenario == "idle" else args.rate
    gateway = TracedGateway(args, rate, watchers, trace)
    ctx = multiprocessing.get_context("fork")
    ready, stopping = ctx.Event(), ctx.Event()
    proc: subprocess.Popen | multiprocessing.process.BaseProcess | None = None
    try:
        wait_for_port(gateway.port, gateway.proc)
        wait_served(gateway.url)
        # under load, the baseline waits for the worker's window to fill, so the window's
        # entries (a fixed cost) are not counted per watcher
        time.sleep(RING_SLOTS / rate + 1.0 if rate else 1.0)
        before, snap_before = gateway.dump()
        before_snapshot = tracemalloc.Snapshot.load(snap_before) if snap_before else None
        resume_from = 0  # idle: nothing to replay (and no probe stream left in the census)
        while rate and not resume_from:  # the load task's first event: nothing to replay after it
            resume_from = newest_id(gateway.url, "murmur.WatchSession")
        if args.csse and rate:
            proc = csse(args, gateway.url, watchers, resume_from, gateway.folder)
        else:
            process = ctx.Process(target=client, args=(gateway.url, watchers, resume_from, ready, stopping),
                                  daemon=True)
            process.start()
            proc = process
            if not ready.wait(args.connect_timeout):
                raise TimeoutError("the watchers did not open in time")
        time.sleep(args.settle if scenario == "load" else 1.0)
        after, snap_after = gateway.dump()
        result = {"scenario": scenario, "watchers": watchers, "rate": rate, "traced": trace}
        if trace:
            assert snap_after is not None  # traced: the gateway dumped its snapshot
            result.update(traced(tracemalloc.Snapshot.load(snap_after), before_snapshot, watchers, args.top))
        else:
            result.update(plain(after, before, watchers, args.top))
        return result
    finally:
        stopping.set()
        if isinstance(proc, subprocess.Popen):
            proc.kill()
            proc.wait()
        elif proc is not None:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        gateway.close()


def csse(args, url: str, watchers: int, resume_from: int, folder: str) -> subprocess.Popen:
    """The C reader as the load scenario's watchers, once all are connected: a Python
    reader on a busy small machine falls behind, and the worker's write buffers then
    measure the client, not the gateway."""
    ready = os.path.join(folder, "csse-ready.json")
    proc = subprocess.Popen([args.csse, url, "-n", str(watchers), "--mode", "post", "--last-event-id",
                             str(resume_from), "--duration", str(args.settle + 120), "--ready-file", ready,
                             "--connect-timeout", str(args.connect_timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + args.connect_timeout + 10
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"csse did not connect its watchers: {proc.communicate()[0][-1500:]}")
        time.sleep(0.05)
    return proc


def plain(after: dict, before: dict, watchers: int, top: int) -> dict:
    memory = {key: round((after["memory"].get(key, 0) - before["memory"].get(key, 0)) / watchers, 2)
              for key in ("VmRSS", "RssAnon", "malloc_in_use", "malloc_free")}
    rows = []
    for kind, (count, size) in after["census"].items():
        count0, size0 = before["census"].get(kind, [0, 0])
        if size - size0 > 0:
            rows.append((kind, (count - count0) / watchers, (size - size0) / watchers))
    rows.sort(key=lambda row: -row[2])
    return {"kib_per_watcher": memory,
            "census_per_watcher": [{"type": k, "objects": round(c, 2), "bytes": round(b)} for k, c, b in rows[:top]],
            "census_bytes_per_watcher": round(sum(b for _, _, b in rows))}


def made_by(trace):
    """The innermost frame outside the standard library: the code that made the allocation
    (a tracemalloc traceback runs from the oldest frame to the innermost)."""
    return next((f for f in reversed(trace) if not STDLIB.search(f.filename) and not f.filename.startswith("<")),
                trace[-1])


def part_of(trace) -> str:
    filename = made_by(trace).filename
    return next((name for name, marker in PARTS if marker in filename), "other (stdlib, interpreter)")


def short(filename: str) -> str:
    for marker in ("site-packages/", "/gateway/", "/lib/"):
        if marker in filename:
            return filename.split(marker, 1)[1] if marker != "/gateway/" else "gateway/" + filename.split(marker, 1)[1]
    return filename


def traced(after, before, watchers: int, top: int) -> dict:
    stacks = after.compare_to(before, "traceback")
    parts: dict[str, float] = {}
    rows: dict[tuple[str, str], list[int]] = {}
    for stat in stacks:
        parts[part_of(stat.traceback)] = parts.get(part_of(stat.traceback), 0) + stat.size_diff
        frame, caller = stat.traceback[-1], made_by(stat.traceback)
        row = rows.setdefault((f"{short(frame.filename)}:{frame.lineno}", f"{short(caller.filename)}:{caller.lineno}"),
                              [0, 0])
        row[0] += stat.size_diff
        row[1] += stat.count_diff
    line_rows = [{"line": line, "made_by": caller, "bytes": round(size / watchers),
                  "blocks": round(count / watchers, 2)}
                 for (line, caller), (size, count) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]]
    return {"traced_bytes_per_watcher": round(sum(s.size_diff for s in stacks) / watchers),
            "parts_bytes_per_watcher": {k: round(v / watchers)
                                        for k, v in sorted(parts.items(), key=lambda kv: -kv[1])},
            "lines_per_watcher": line_rows}


def markdown(results: list[dict]) -> str:
    out = []
    for r in results:
        out.append(f"\n### {r['scenario']}: {r['watchers']} watchers, {r['rate']:g} events/s "
                   f"({'tracemalloc' if r['traced'] else 'plain: RSS and census'})\n")
        if r["traced"]:
            out.append(f"traced bytes per watcher: {r['traced_bytes_per_watcher']:,}\n")
            out.append("| part (who allocated) | bytes / watcher |\n|---|---|")
            out += [f"| {k} | {v:,} |" for k, v in r["parts_bytes_per_watcher"].items()]
            out.append("\n| line | made by | bytes / watcher | blocks / watcher |\n|---|---|---|---|")
            out += [f"| {x['line']} | {x['made_by']} | {x['bytes']:,} | {x['blocks']} |"
                    for x in r["lines_per_watcher"]]
        else:
            out.append("KiB per watcher: " + ", ".join(f"{k} {v}" for k, v in r["kib_per_watcher"].items()))
            out.append("\ngc-tracked objects, bytes per watcher (getsizeof, shallow): "
                       f"{r['census_bytes_per_watcher']:,}\n")
            out.append("| type | objects / watcher | bytes / watcher |\n|---|---|---|")
            out += [f"| {x['type']} | {x['objects']} | {x['bytes']:,} |" for x in r["census_per_watcher"]]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--idle", type=int, default=2000, help="watchers, idle scenario")
    p.add_argument("--load", type=int, default=1000, help="watchers, load scenario")
    p.add_argument("--rate", type=float, default=100.0, help="load events a second")
    p.add_argument("--size", type=int, default=300, help="load event text, bytes")
    p.add_argument("--settle", type=float, default=5.0, help="seconds of load before the dump")
    p.add_argument("--frames", type=int, default=12, help="tracemalloc frames kept per allocation")
    p.add_argument("--top", type=int, default=20, help="rows per table")
    p.add_argument("--connect-timeout", type=float, default=180.0, help="bound on opening the watchers, seconds")
    p.add_argument("--only", choices=("idle", "load"), action="append")
    p.add_argument("--no-trace", action="store_true", help="the plain runs only (RSS, malloc, census)")
    p.add_argument("--csse", help="the C SSE reader's binary: the load scenario's watchers (else a Python reader)")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args(argv)
    raise_nofile(max(args.idle, args.load) + 256)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, python {sys.version.split()[0]}")
    results = []
    for scenario in args.only or ("idle", "load"):
        for trace in (False,) if args.no_trace else (False, True):
            results.append(measure(args, scenario, trace))
            print(markdown(results[-1:]), flush=True)  # each as it comes: a later run may fail
            if args.json:
                with open(args.json, "wb") as fh:
                    fh.write(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
