"""loadtest/opencost.py runs against the real gateway: a smoke run, not a benchmark. Every
variant (plain, TLS, HTTP/2) opens its streams, each answered 200 (the
tool stops on any refusal), and reports a line; no timing figure is asserted."""

from __future__ import annotations

import subprocess
import sys

import orjson

from helpers.gateway_harness import ROOT

RUN_TIMEOUT = 180


def test_every_variant_opens_its_streams_and_reports_a_line():
    out = subprocess.run([sys.executable, "-m", "loadtest.opencost", "--openings", "3", "--concurrency", "3",
                          "--settle", "0.2"], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert out.returncode == 0, out.stderr
    lines = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert [line["variant"] for line in lines] == [
        "http/1.1, plain", "http/1.1, TLS", "h2, TLS, one stream a connection"]
    assert all(line["openings"] == 3 and line["tree_us_per_opening"] >= 0 for line in lines)
