"""The load kit runs against the real gateway: the driver and locust, for a few seconds each.

Smoke runs, not benchmarks: they assert that connections opened, events arrived, the
driver's id checks found nothing wrong and locust wrote its CSV; never a timing figure.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys

import orjson
import pytest

from loadtest.csse_client import newest_id
from helpers.gateway_harness import CSSE_BUILD, GatewayOptions, ROOT, wait_for

RUN_TIMEOUT = 120


@pytest.fixture(scope="module")
def gateway_options():
    """One loaded gateway the kit's clients take turns on (each opens watchers of its own)."""
    return GatewayOptions("--sim-load", "200")


def test_driver_holds_watchers_and_checks_their_ids(gateway):
    out = subprocess.run(
        [sys.executable, "-m", "loadtest.driver", "--url", f"http://127.0.0.1:{gateway.port}/",
         "--watchers", "20", "--duration", "2", "--warmup", "0.5", "--connect-timeout", "20",
         "--heartbeat-interval", "0.3", "--server-pid", str(gateway.pid)],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert out.returncode == 0, out.stderr
    report = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert report["opened"] == 20 and report["failed"] == 0
    assert report["deliveries"] > 0 and report["latency_ms"]["count"] > 0
    assert report["heartbeat_interval_s"]["count"] > 0
    assert report["order_violations"] == 0 and report["unexplained_holes"] == 0
    assert report["server_cpu_s"] is not None and report["client_cpu_s"] >= 0


@pytest.mark.skipif(not (os.path.exists(CSSE_BUILD) and shutil.which("gcc")), reason="no csse sources or gcc")
def test_csse_client_takes_the_driver_options_and_reports_like_it(gateway, tmp_path):
    """The bench's `--client` contract: the driver's options in, the driver's report out;
    the probe finds the newest id, which the watchers then send as Last-Event-ID."""
    binary = subprocess.run(["bash", CSSE_BUILD, str(tmp_path / "csse")], capture_output=True, text=True,
                            check=True).stdout.strip()
    url = f"http://127.0.0.1:{gateway.port}/"
    wait_for(lambda: newest_id(url, "murmur.WatchSession") > 0, what="a load event to resume from")
    out = subprocess.run(
        [sys.executable, "-m", "loadtest.csse_client", binary, "--url", f"http://127.0.0.1:{gateway.port}/",
         "--watchers", "20", "--procs", "1", "--duration", "2", "--warmup", "0.5", "--connect-timeout", "20",
         "--server-pid", str(gateway.pid)],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert out.returncode == 0, out.stderr
    report = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert report["opened"] == 20 and report["failed"] == 0 and report["errors"] == []
    assert report["deliveries"] > 0 and report["latency_ms"]["count"] > 0
    assert report["events_lost"] == 0 and report["order_violations"] == 0
    assert report["server_cpu_s"] is not None and report["server_rss_kib_connected"] > 0


def test_memparts_counts_one_stream_per_idle_watcher(tmp_path):
    """The memory tool's worker dump sees the watchers it opened (a plain run, no tracing)."""
    out = subprocess.run(
        [sys.executable, "-m", "loadtest.memparts", "--only", "idle", "--idle", "20", "--no-trace",
         "--top", "200", "--json", str(tmp_path / "mem.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    [result] = orjson.loads((tmp_path / "mem.json").read_bytes())
    census = {row["type"]: row["objects"] for row in result["census_per_watcher"]}
    assert census["gateway.worker.delivery.stream.Stream"] == 1.0
    assert result["kib_per_watcher"]["VmRSS"] > 0


def test_locust_headless_run_reports_sse_events(gateway, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", os.path.join(ROOT, "loadtest", "locustfile.py"),
         "--headless", "-u", "5", "-r", "5", "-t", "3s", "--host", f"http://127.0.0.1:{gateway.port}",
         "--csv", str(tmp_path / "sse"), "--only-summary", "--stop-timeout", "2", "-L", "WARNING",
         "--heartbeat-interval", "0.3"],
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp_path / "sse_stats.csv", newline="") as fh:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(fh)}
    assert int(rows[("POST", "murmur.WatchSession")]["Request Count"]) > 0
    assert int(rows[("SSE", "text")]["Request Count"]) > 0
    assert int(rows[("SSE", "heartbeat")]["Request Count"]) > 0


def test_idle_watcher_count_starts_its_gateway_and_reports_memory_per_watcher():
    out = subprocess.run([sys.executable, "-m", "loadtest.idle20k", "--watchers", "30", "--settle", "0.5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert out.returncode == 0, out.stderr
    report = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert report["connected"] == 30 and report["refused"] == 0 and report["failures"] == {}
    assert sum(report["connections_per_process"]) >= 30
    assert report["server_rss_mib"] > 0 and report["server_pss_mib"] > 0  # smaps_rollup was read
