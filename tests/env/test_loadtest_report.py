"""The load kit's progress and reports (issue #43): a short run of every command with --report.

One module-scoped fixture runs each command once, all at the same time, a few hundred
watchers for a few seconds, against real servers (the gateway, and nginx+nchan where it is
installed); every test reads those runs: the page and its SVG charts exist, the page renders
in headless Chromium with every chart drawn and the table's figures (folded away) equal to the
run's own JSON, the page leads with a summary whose every cell is the table's figure it names
(issue 48), progress lines in a non-terminal run (none with --quiet), the peers in the same
charts, the charts' series equal to the recorded samples, every plotted percentile the table's
own (the same timed deliveries), and no series zero throughout. No timing is asserted.
"""

from __future__ import annotations

import contextlib
import glob
import html.parser
import math
import os
import pty
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import types

import matplotlib.pyplot as plt
import orjson
import pytest

from helpers.gateway_harness import CSSE_BUILD, ROOT, GatewayOptions, require_tool
from loadtest import bench, servers

RUN_TIMEOUT = 240
GROUP_GRACE = 5.0  # how long a command's process group has to leave after SIGTERM
HAVE_NCHAN = bool(shutil.which("nginx")) and os.path.exists(servers.NCHAN_MODULE)
PAGE_CHARTS = {"ramp", "cpu", "rss"}  # drawn for every command; the others where the run has their data


def start(argv: list[str], **kw) -> subprocess.Popen:
    """`python -m argv` in a session of its own, so `end_group` reaches every gateway, nginx
    and client it starts (a kill of the parent alone would leave them running)."""
    return subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, start_new_session=True, **kw)


def group_left(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def end_group(proc: subprocess.Popen) -> None:
    """End a command started by `start` and its process group, by the group's id: SIGTERM,
    up to GROUP_GRACE s to leave, then SIGKILL to what is left. Harmless once all have left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + GROUP_GRACE
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(GROUP_GRACE)  # reaped, so a zombie parent does not count as left in the group
        while group_left(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_left(proc.pid):
            break
    proc.wait()


@pytest.fixture(scope="module")
def gateway_options():
    """The gateway the driver's run reads (the other commands start servers of their own)."""
    return GatewayOptions("--sim-load", "20", metrics=True)


@pytest.fixture(scope="module")
def csse(tmp_path_factory) -> str | None:
    """The C reader, built for crowd and openings (their runs are left out without it)."""
    if not (os.path.exists(CSSE_BUILD) and shutil.which("gcc")):
        return None
    out = tmp_path_factory.mktemp("csse") / "csse"
    return subprocess.run(["bash", CSSE_BUILD, str(out)], capture_output=True, text=True, check=True).stdout.strip()


def commands(gateway, csse: str | None, out) -> dict[str, list[str]]:
    peers = HAVE_NCHAN
    runs = {
        "driver": ["loadtest.driver", "--url", f"http://127.0.0.1:{gateway.port}/", "--watchers", "200",
                   "--duration", "3", "--warmup", "0.5", "--procs", "1", "--server-pid", str(gateway.pid),
                   "--metrics-port", str(gateway.metrics_port), "--progress-every", "0.5"],
        "bench": ["loadtest.bench", *(["--only", "gateway", "--only", "nchan"] if peers else ["--only", "gateway"]),
                  "--scenario", "large", "--large", "200", "--duration", "1.5",
                  "--warmup", "0.3", "--ladder", "0", "--rate", "20", "--workers", "1", "--nginx-workers", "2",
                  "--procs", "1", "--json", str(out / "bench.json"), "--quiet"],
        "storm": ["loadtest.storm", "--watchers", "300", "--workers", "2", "--rate", "20", "--events-before", "40",
                  "--max-back", "30", "--hold", "0.5", *(["--peer", "nchan"] if peers else []), "--quiet"],
        "idle20k": ["loadtest.idle20k", "--watchers", "200", "--settle", "0.5", "--procs", "1", "--quiet"],
        "soak": ["loadtest.soak", "--minutes", "0.1", "--watchers", "100", "--rate", "20", "--cycle", "5",
                 "--warmup", "0.5", "--workers", "1", "--quiet"],
    }
    if csse:
        servers = "gateway,nchan" if peers else "gateway"
        runs["crowd"] = ["loadtest.crowd", "--csse", csse, "--watchers", "200", "--workers", "2", "--procs", "1",
                         "--settle", "0.5", "--window", "2", "--rate", "5", "--heartbeat-interval", "1",
                         "--server", servers, "--quiet"]
        runs["openings"] = ["loadtest.openings", "--csse", csse, "--watchers", "200", "--connect-concurrency", "100",
                            "--repeats", "1", "--systems", servers, "--server-cpus", "", "--client-cpus", "",
                            "--quiet"]
    return runs


@pytest.fixture(scope="module")
def runs(gateway, csse, tmp_path_factory) -> dict[str, types.SimpleNamespace]:
    """Every command once with --report, all at once; name -> its directory, stdout, stderr."""
    out = tmp_path_factory.mktemp("runs")
    started = {}
    try:
        for name, argv in commands(gateway, csse, out).items():
            directory = out / name
            argv = [*argv, "--report", str(directory)]
            started[name] = (argv, directory, start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        done = {}
        for name, (argv, directory, proc) in started.items():
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
            done[name] = types.SimpleNamespace(argv=argv, dir=directory, stdout=stdout, stderr=stderr,
                                               returncode=proc.returncode, out=out)
        return done
    finally:  # on success too: what a command left behind goes with its group
        for _, _, proc in started.values():
            end_group(proc)


NAMES = ["driver", "bench", "storm", "idle20k", "soak", "crowd", "openings"]


@pytest.fixture(params=NAMES)
def run(request, runs):
    if request.param not in runs:
        pytest.skip("needs the C reader (csse's sources and gcc)")
    return runs[request.param]


def recorded(run) -> dict:
    return orjson.loads((run.dir / "run.json").read_bytes())


def json_lines(run) -> list[dict]:
    return [orjson.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def test_every_command_writes_its_page_charts_and_record(run):
    assert run.returncode == 0, run.stderr[-3000:]
    assert (run.dir / "index.html").exists()
    charts = {os.path.basename(path)[:-4] for path in glob.glob(str(run.dir / "*.svg"))}
    assert PAGE_CHARTS <= charts
    record = recorded(run)
    assert record["command_line"].split()[2] == run.argv[0] and record["command_line"].endswith(str(run.dir))
    assert record["machine"]["cores"] == os.cpu_count() and record["machine"]["python"]
    assert record["samples"], "the monitor took no samples"
    if run.argv[0] in ("loadtest.driver", "loadtest.bench", "loadtest.soak"):
        assert {"deliveries", "latency"} <= charts
    if run.argv[0] == "loadtest.storm":
        assert "replay" in charts


# --- the page in a browser ---

@pytest.fixture(scope="module")
def browser():
    require_tool("/usr/bin/chromium", "chromium")
    require_tool("/usr/bin/chromedriver", "chromium-driver")
    from test_watch_page import chromium
    with chromium() as driver:
        yield driver


def cell_matches(text: str, value) -> bool:
    """A cell shows its value: numbers to the digits shown (0 decimals from 100 on, else 2)."""
    if value is None:
        return text == "–"
    if isinstance(value, bool):
        return text == ("yes" if value else "no")
    if isinstance(value, (int, float)):
        shown = float(text.replace(",", ""))
        return math.isclose(shown, value, abs_tol=0.5001 if abs(value) >= 100 else 0.00501)  # half the last digit shown
    return text == str(value)


def leaf(data: dict, dotted: str):
    """The value at `a.b.c` in the run's JSON (a key may itself hold dots: the longest match wins)."""
    if dotted in data:
        return data[dotted]
    for cut in range(len(dotted), 0, -1):
        head = dotted[:cut]
        if head in data and dotted[cut:cut + 1] == "." and isinstance(data[head], dict):
            return leaf(data[head], dotted[cut + 1:])
    raise KeyError(dotted)


def expected_columns(run) -> dict[str, dict]:
    """What each column of the page's table comes from: the command's own JSON output."""
    lines = json_lines(run)
    command = run.argv[0]
    if command == "loadtest.bench":
        args = types.SimpleNamespace(small=1000, large=200, idle=10000, workers=1)  # bench's defaults but --large
        table = bench.summarise(orjson.loads((run.out / "bench.json").read_bytes()), args)
        return {system: {f: v for f, v in table[system].items()} for system in bench.SYSTEMS}
    if command == "loadtest.storm" and "peers" in lines[-1]:
        return {"gateway": lines[-1], **lines[-1]["peers"]}
    if command == "loadtest.crowd" and len(lines) > 1:
        return {line["server"]: line for line in lines}
    if command == "loadtest.openings":
        summary, each = lines[-1], lines[:-1]
        columns = {}
        for system in summary["median_cpu_us_per_opening"]:
            mine = [line for line in each if line["system"] == system]
            columns[system] = {"runs": len(mine), "median opened": statistics.median(r["opened"] for r in mine),
                               "median server CPU µs / opening": summary["median_cpu_us_per_opening"][system],
                               "median open s": summary["median_open_s"][system],
                               "median RSS KiB / stream": statistics.median(r["rss_kib_per_stream"] for r in mine)}
        if "gateway_over_nchan" in summary:
            columns["gateway"]["CPU / opening, gateway / nchan"] = summary["gateway_over_nchan"]
        return columns
    return {"value": lines[-1]}


@pytest.mark.env
def test_the_page_renders_every_chart_and_the_runs_figures(run, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"file://{run.dir / 'index.html'}")
    images = browser.find_elements(By.CSS_SELECTOR, "img.chart")
    assert len(images) == len(glob.glob(str(run.dir / "*.svg")))
    WebDriverWait(browser, 20, 0.05).until(lambda d: all(d.execute_script(
        "return arguments[0].complete", image) for image in images))
    for image in images:
        assert browser.execute_script("return arguments[0].naturalWidth", image) > 0, image.get_attribute("alt")
    assert not browser.find_element(By.ID, "figures").is_displayed()  # the raw figures are folded away
    browser.find_element(By.CSS_SELECTOR, "#raw > summary").click()
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#figures thead th")][1:]
    shown = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#figures tbody tr"):
        shown[row.find_element(By.TAG_NAME, "th").text] = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    columns = expected_columns(run)
    assert heads == list(columns)
    checked = 0
    for figure, cells in shown.items():
        for column, text in zip(heads, cells):
            try:
                value = leaf(columns[column], figure)
            except KeyError:
                assert text == "–", f"{figure} in {column}: shown {text}, not in the run's JSON"
                continue
            assert cell_matches(text, value), f"{figure} in {column}: shown {text}, the run's JSON has {value}"
            checked += 1
    assert checked >= 3
    assert browser.find_element(By.ID, "command").text.startswith(f"python -m {run.argv[0]} ")


# --- progress ---

def test_a_non_terminal_run_prints_plain_progress_lines_with_the_open_count(runs):
    lines = re.findall(r"^\[driver +\d+s\] .*?: open (\d+)/(\d+) ", runs["driver"].stderr, re.M)
    assert lines, runs["driver"].stderr[-2000:]
    assert ("200", "200") in lines  # every watcher open, read from the client's own counts


def test_a_terminal_gets_the_rich_progress(gateway):
    """stderr a terminal (a pty): rich's bar with the open count, no plain lines."""
    master, terminal = pty.openpty()
    shown = []

    def drain():
        with contextlib.suppress(OSError):  # EIO once the driver has closed its end
            while chunk := os.read(master, 65536):
                shown.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = start(["loadtest.driver", "--url", f"http://127.0.0.1:{gateway.port}/", "--watchers", "50",
                  "--duration", "1", "--warmup", "0.3", "--procs", "1", "--label", "terminal-run"],
                 stdout=subprocess.PIPE, stderr=terminal, env={**os.environ, "COLUMNS": "200"})
    try:
        proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        end_group(proc)
        os.close(terminal)
        reader.join(10)
        os.close(master)
    assert proc.returncode == 0
    text = b"".join(shown).decode(errors="replace")
    assert re.search(r"terminal-run .*50/50 open", text), text[-2000:]
    assert "[driver" not in text


@pytest.mark.parametrize("name", ["bench", "storm", "idle20k", "soak"])
def test_quiet_prints_no_progress(runs, name):
    assert runs[name].returncode == 0
    assert not re.search(r"^\[\w+ +\d+s\]", runs[name].stderr, re.M), runs[name].stderr[-2000:]
    assert " open " not in runs[name].stderr


# --- peers ---

def series_reached(samples: list[dict], label: str, key: str) -> float:
    return max((s.get(key) or 0 for s in samples if s["series"] == label), default=0)


@pytest.mark.skipif(not HAVE_NCHAN, reason="nginx with libnginx-mod-nchan is not installed")
def test_nchan_is_drawn_beside_the_gateway_replaying_its_prefilled_buffer(runs):
    samples = recorded(runs["bench"])["samples"]
    systems = {s["system"] for s in samples}
    assert {"gateway", "nchan"} <= systems
    assert series_reached(samples, "nchan large 200w x2", "open") == 200  # the client's count
    assert series_reached(samples, "nchan large 200w x2", "server_open") >= 200  # nchan's stub status
    storm = json_lines(runs["storm"])[-1]
    nchan = storm["peers"]["nchan"]
    assert nchan["opened"] == 300 and nchan["exact"] and nchan["newest_id_at_start"] >= 40  # the prefill
    assert series_reached(recorded(runs["storm"])["samples"], "nchan storm", "replayed") == 300
    assert len(nchan["connections_by_pid"]) == 2, nchan["connections_by_pid"]  # reuseport: both workers took some
    with open(os.path.join(ROOT, "loadtest", "servers.py")) as fh:  # where the nchan config is written
        assert "nchan_subscriber_first_message oldest" in fh.read()


# --- the charts' data ---

def interval_rates(xs, ys):
    return [(x1, (y1 - y0) / (x1 - x0)) for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:]) if x1 > x0 and y1 >= y0]


def plotted(figure, label: str) -> list[tuple[float, float]]:
    [line] = [line for line in figure.axes[0].get_lines() if line.get_label() == label]
    return list(zip(line.get_xdata(), line.get_ydata()))


def test_the_charts_plot_the_recorded_samples(runs):
    """A recorded run fed to the chart code: every line is its samples, or its driver report."""
    from loadtest import report

    run = recorded(runs["driver"])
    samples, result = run["samples"], run["result"]
    figures = report.charts(run)
    label = samples[0]["series"]
    mine = [s for s in samples if s["series"] == label]
    began = next(s["t"] for s in mine if s["phase"] != "starting")  # x: seconds since the clients began
    for s in mine:
        s["x"] = round(s["t"] - began, 3)
    assert plotted(figures["ramp"], label) == [(s["x"], s["open"]) for s in mine]
    assert max(y for _, y in plotted(figures["ramp"], label)) == 200
    assert plotted(figures["deliveries"], label) == interval_rates(
        [s["x"] for s in mine], [s["deliveries"] for s in mine])
    assert plotted(figures["cpu"], label) == interval_rates([s["x"] for s in mine],
                                                            [s["cpu_s"] for s in mine])
    # memory per watcher: from the driver's reading before, ending on the table's figure
    memory = plotted(figures["rss"], label)
    base, end = result["server_rss_kib_before"], result["window_ends_at"] - run["epoch"] - began
    assert memory[:-1] == [(s["x"], round((s["rss_kib"] - base) / s["open"], 2)) for s in mine
                           if 0 <= s["x"] < end and s.get("open")]
    assert memory[-1] == (round(end, 3), round((result["server_rss_kib_connected"] - base) / result["opened"], 2))
    plt.close("all")


def percentile_lines(figure, label: str) -> tuple[list, list, list]:
    return plotted(figure, label + " p50"), plotted(figure, label + " p99"), plotted(
        figure, label + " p99 of the window (the table's)")


@pytest.mark.parametrize("name", ["driver", "bench", "soak"])
def test_every_plotted_percentile_is_the_tables_own(runs, name):
    """Issue 48: the latency chart's percentiles are of the samples the table's are computed
    from. Each second's p50 and p99 are the driver's report's, their counts add up to the
    window's (every timed delivery is in one second), and the window's p99 drawn is the
    table's; for the bench, the table's p99 at the large count is that run's."""
    from loadtest import report

    run = recorded(runs[name])
    figures = report.charts(run)
    drivers = [r for r in (run["result"] if name == "bench" else run["result"].get("cycles_detail", [run["result"]]))
               if r.get("latency_ms_by_second")]
    assert drivers
    lines = [line for line in figures["latency"].axes[0].get_lines()]
    for driver in drivers:
        label = driver.get("label") or run["samples"][0]["series"]
        seconds = [b for b in driver["latency_ms_by_second"] if b["count"]]
        assert sum(b["count"] for b in seconds) == driver["latency_ms"]["count"]
        drawn = [line for line in lines if line.get_label().lstrip("_") == label + " p99"]
        assert [b["p99"] for b in seconds] in [list(line.get_ydata()) for line in drawn]
        drawn = [line for line in lines if line.get_label().lstrip("_") == label + " p50"]
        assert [b["p50"] for b in seconds] in [list(line.get_ydata()) for line in drawn]
        window = [line for line in lines if line.get_label().lstrip("_") == label + " p99 of the window (the table's)"]
        assert [driver["latency_ms"]["p99"]] * 2 in [list(line.get_ydata()) for line in window]
    if name == "driver":
        table = outcome_columns(run)["value"]
        assert table["latency_ms.p99"] == drivers[0]["latency_ms"]["p99"]
    if name == "bench":
        large = next(r for r in drivers if r["system"] == "gateway" and r["scenario"] == "large")
        assert outcome_columns(run)["gateway"]["latency p99 ms @ 200"] == large["latency_ms"]["p99"]
    plt.close("all")


def outcome_columns(run) -> dict[str, dict]:
    """The run's table as column -> {figure: value}, read from run.json."""
    names = run["figures"]["columns"]
    return {name: {row[0]: row[1 + i] for row in run["figures"]["rows"]} for i, name in enumerate(names)}


class SummaryCells(html.parser.HTMLParser):
    """The page's #summary table: [(row, [(shown text, data-source)])]."""

    def __init__(self):
        super().__init__()
        self.rows, self.heads, self.where, self.cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.where = "table" if attrs.get("id") == "summary" else None
        elif self.where == "table" and tag == "th":
            self.heads.append("")
            self.cell = "head"
        elif self.where == "table" and tag == "tbody":
            self.where = "summary"
        elif self.where == "summary" and tag == "tr":
            self.rows.append(["", []])
        elif self.where == "summary" and tag == "th" and self.rows:
            self.cell = "th"
        elif self.where == "summary" and tag == "td":
            self.rows[-1][1].append(["", attrs.get("data-source")])
        elif self.where == "summary" and tag == "span" and attrs.get("class") == "value":
            self.cell = "value"

    def handle_endtag(self, tag):
        if tag in ("th", "span"):
            self.cell = None
        if tag == "table":
            self.where = None

    def handle_data(self, data):
        if self.cell == "head":
            self.heads[-1] += data
        elif self.cell == "th":
            self.rows[-1][0] += data
        elif self.cell == "value":
            self.rows[-1][1][-1][0] += data


def test_the_page_leads_with_the_outcome_and_it_is_the_runs_own(run):
    """Issue 48: the page opens on a summary (opened, failed, exact, lost, p99, CPU, memory per
    watcher, a column per server); each cell is the table's figure it names, or computed by the
    rule it names, from run.json."""
    text = (run.dir / "index.html").read_text()
    assert text.index('id="summary"') < text.index('id="chart-') < text.index('<details id="raw">') < text.index(
        'id="figures"')
    parser = SummaryCells()
    parser.feed(text)
    record = recorded(run)
    columns = outcome_columns(record)
    shown = [column for column in parser.heads if column]
    assert set(shown) <= set(columns) and shown  # the servers that ran (the table keeps every system's column)
    columns = {column: columns[column] for column in shown}
    rows = {row: cells for row, cells in parser.rows if row}
    assert "watchers opened" in rows or run.argv[0] == "loadtest.soak"  # a soak's cycles each open their own
    assert "latency p99 ms" in rows or run.argv[0] not in ("loadtest.driver", "loadtest.bench", "loadtest.soak")
    for row, cells in rows.items():
        assert len(cells) == len(columns)
        for (shown, source), (column, figures) in zip(cells, columns.items()):
            if not source:
                assert shown == "–", (row, column)
            elif source in figures:
                assert cell_matches(shown, figures[source]), (row, column, source, shown)
            elif source.startswith("unexplained holes"):
                holes = figures.get("unexplained_holes", figures.get("ids_holes"))
                disorder = figures.get("order_violations", figures.get("ids_nonascending"))
                assert shown == ("yes" if holes == 0 and disorder == 0 else "no"), (row, column)
            else:
                assert source.startswith("(server_rss_kib_connected"), source
                value = (figures["server_rss_kib_connected"] - figures["server_rss_kib_before"]) / figures["opened"]
                assert cell_matches(shown, round(value, 2)), (row, column, shown)


def test_no_chart_draws_a_series_that_is_zero_throughout(run):
    """Issue 48: the ramp's legend had its all-zero "failed" lines, the lost chart an all-zero series."""
    from loadtest import report

    for name, figure in report.charts(recorded(run)).items():
        for line in figure.axes[0].get_lines():
            assert any(y for y in line.get_ydata() if y is not None), (name, line.get_label())
    plt.close("all")
