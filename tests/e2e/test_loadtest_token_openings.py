"""`loadtest.openings --token-modes`: its doors and its opener, against the real gateway for a
few openings each (a smoke run, never a timing figure): every opening opens, and the worker
checks one signature for a cached token, one per opening for fresh ones."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from helpers.gateway_harness import ROOT, running_gateway, scrape
from loadtest import opening_tokens

OPENINGS = 6


@pytest.mark.parametrize("mode, signatures", [("static", 0), ("cached-es256", 1), ("fresh-es256", OPENINGS),
                                              ("fresh-rs256", OPENINGS), ("fresh-hs256", OPENINGS)])
def test_each_token_mode_opens_every_stream_and_checks_the_signatures_it_should(tmp_path, mode, signatures):
    config, tokens = opening_tokens.door(mode, tmp_path, OPENINGS)
    with running_gateway("--config", str(config), workers=1, metrics=True, tmp_path=tmp_path) as gw:
        out = subprocess.run(
            [sys.executable, "-m", "loadtest.opening_tokens", f"http://127.0.0.1:{gw.port}/", "--tokens-file",
             str(tokens), "-n", str(OPENINGS), "--connect-concurrency", "3", "--connect-timeout", "20",
             "--ready-file", str(tmp_path / "ready"), "--duration", "0.2"],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        report = orjson.loads(out.stdout.strip().splitlines()[-1])
        assert (report["conns_opened"], report["fail_reasons"]) == (OPENINGS, {})
        assert (tmp_path / "ready").exists()
        assert scrape(gw.metrics_port)["murgw_jwt_verifications_total"] == signatures
