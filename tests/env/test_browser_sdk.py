"""The A2A JS SDK (`@a2a-js/sdk`, from npm) in a real browser, on another origin than the
gateway's: docs/browsers.md's sample, run as written there, bundled by esbuild into a page
that a stand-in application server (tests/env/browser/app_server.mjs, on 127.0.0.2) serves,
with the short-lived ES256 JWTs that server mints with node's `jose`, as an application's
backend would. Headless Debian chromium runs it against the gateway on 127.0.0.1 with
`--allowed-origins` naming the page's origin (without it, the browser refuses the page the
answers: the first fetch fails).

The npm packages are installed (`npm ci`) into tests/env/browser/node_modules, git-ignored and
kept between runs, when missing or older than the lock file; node, npm and chromium are
installed by .ci/run, so CI skips nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.browser import chromium, require_browser, wait
from helpers.gateway_harness import ROOT, require_tool, running_gateway, token_table
from helpers.sse_reading import SSEStream, item, task_id_of

pytestmark = pytest.mark.env

BROWSER = Path(ROOT) / "tests" / "env" / "browser"
SAMPLE = re.compile(r"<!-- browser-sample: watch-task\.js -->\n```js\n(.*?)```", re.DOTALL)
WATCH = "murmur.WatchSession"
WATCHER = "reference-watcher"
LIVE = str(2**40)
LIFETIME, REFRESH = 6, 3  # each token lives 6 s; the page leaves its stream 3 s before exp
TASK = "/scenario slow turns=8 delay=1"  # outlives two tokens at least


@pytest.fixture(scope="module")
def packages():
    """@a2a-js/sdk, esbuild and jose as the lock file pins them, installed once."""
    require_tool("node", "nodejs")
    npm = require_tool("npm", "npm")
    installed = BROWSER / "node_modules" / ".package-lock.json"
    lock = BROWSER / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=BROWSER, check=True, timeout=300,
                       stdout=subprocess.DEVNULL)


def write_sample() -> None:
    """docs/browsers.md's sample, where page.js imports it from."""
    found = SAMPLE.search((Path(ROOT) / "docs" / "browsers.md").read_text())
    assert found, "docs/browsers.md has no <!-- browser-sample: watch-task.js --> block"
    (BROWSER / "build").mkdir(exist_ok=True)
    (BROWSER / "build" / "watch-task.js").write_text(found.group(1))


def app_server(key_file: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(["node", str(BROWSER / "app_server.mjs"), str(key_file), str(LIFETIME)],
                            stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        pytest.fail("the application server did not start")
    return proc, json.loads(line)["port"]


def page_result(driver) -> dict | None:
    return driver.execute_script("return window.result")


def test_the_sdk_streams_refreshes_its_token_and_resumes_losing_nothing(packages, tmp_path):
    require_browser()
    write_sample()
    server, port = app_server(tmp_path / "app-key.pem")
    try:
        config = tmp_path / "gateway.toml"
        config.write_text(token_table([("watcher", WATCHER, [WATCH])]) +
                          f'[network.authentication.jwt]\nkey_file = "{tmp_path / "app-key.pem"}"\n'
                          'algorithms = ["ES256"]\n')
        page_origin = f"http://127.0.0.2:{port}"
        with running_gateway("--config", str(config), "--allowed-origins", page_origin, workers=1,
                             tmp_path=tmp_path) as gw, chromium() as driver:
            reference = SSEStream(gw.port, WATCH, {}, token=WATCHER, last_event_id=LIVE)
            try:
                query = f"gateway=http://127.0.0.1:{gw.port}/&refresh={REFRESH}&text={TASK.replace(' ', '%20')}"
                driver.get(f"{page_origin}/?{query}")
                wait(driver, lambda: (r := page_result(driver)) is not None and (r["state"] or r["error"]),
                     timeout=120)
                seen = page_result(driver)
                assert seen["error"] is None, seen["error"]
                assert seen["state"] == "TASK_STATE_COMPLETED"
                openings = [e for e in seen["events"] if e["kind"] == "task"]
                assert len(openings) >= 2 and seen["tokens"] >= 2, seen  # refreshed, and resumed
                page_ids = [int(e["id"]) for e in seen["events"] if e["id"] is not None]
                # Every event of the task the gateway wrote (its plain stream: no murmur frames),
                # exactly once, in order, across every stream the page opened.
                task_events = reference.read_until(lambda e: e.id is not None and e.id >= page_ids[-1])
                task_id = task_id_of(task_events[-1])
                expected = [e.id for e in task_events
                            if e.id is not None and task_id_of(e) == task_id and item(e).frame is None]
                assert page_ids == expected
            finally:
                reference.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
