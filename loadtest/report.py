"""One load run as a page: its outcome first, then its charts (SVG), then every figure, folded.

`--report DIR` on every command of the kit ends here. The run is a dict: the command and its
exact command line, when it started (and `epoch`, the wall-clock instant its samples count
from), its figures (`figures`: columns and rows, the table the command prints), its full
result, and the samples `loadtest/monitor.py` took twice a second of each server it followed.
`write` keeps that as `run.json`, draws the charts with matplotlib (Agg, no display) as SVG
files, and writes `index.html`: the outcome (loadtest/outcome.py: opened, failed, exact, lost,
p99, CPU and memory per watcher, a column per server, each cell naming the table's figure it
is), the charts (inlined as data: images, the same bytes as their files), then, folded in a
<details>, the whole table, the command line, the machine and the versions.

Every series is drawn against the seconds since its own clients began (`origin`), so the
gateway and each peer of the same run (nginx+nchan, the naive baseline) share a chart. A
series that is zero throughout is left out (its figure is in the outcome), and so is a chart
left with none. What each chart draws, and where from:

- ramp.svg: watchers open (the client's count, else the server's), failed openings;
- deliveries.svg: deliveries a second (the client's, else the gateway's counter);
- latency.svg: delivery latency p50 and p99 in each second of the measuring window, and the
  window's p99 (the table's `latency_ms.p99`), all from the driver's own timed deliveries by
  the same function (loadtest/driver.py's `latency_by_second`, `quantiles`): the chart's
  percentiles and the table's are of the same samples;
- cpu.svg: each server's process tree (/proc);
- rss.svg: memory per open watcher: the tree's RSS above what it was before the clients began,
  over the watchers open, beside the table's figure for it (the outcome's row, a dotted line):
  one quantity, drawn and tabled, not the whole tree's RSS beside a per-watcher figure;
- replay.svg (storms): watchers whose replay is complete (the client's count), or, read by
  csse, the replays the gateway began; lost.svg: events lost to lag; jitter.svg: heartbeat
  jitter p99 in each interval, estimated from the gateway's histogram as Prometheus does
  (loadtest/histogram.py), as the bench's table estimates it.
"""

from __future__ import annotations

import base64
import html
import os
import shlex
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import orjson  # noqa: E402

from loadtest import histogram, machine, outcome  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "murmur-loadtest", "figure.figsize": (9, 3.6),
                     "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 7})


# --- the series each chart draws, derived from the samples ---

def labels(samples: list[dict]) -> list[str]:
    """The followed servers, in the order they first appear."""
    return list(dict.fromkeys(sample["series"] for sample in samples))


def origin(samples: list[dict], label: str) -> float:
    """When `label`'s clients began (its first sample past "starting"), on the run's clock:
    every series is drawn from there, so servers that took longer to start (or a storm's
    gateway filling its buffer at the load's rate) line up with their peers."""
    mine = [s for s in samples if s["series"] == label]
    return next((s["t"] for s in mine if s["phase"] != "starting"), mine[0]["t"] if mine else 0.0)


def of(samples: list[dict], label: str, key: str) -> tuple[list[float], list[Any]]:
    """(seconds since the clients began, value) for each sample of `label` that has `key`."""
    zero = origin(samples, label)
    rows = [s for s in samples if s["series"] == label and s.get(key) is not None]
    return [round(s["t"] - zero, 3) for s in rows], [s[key] for s in rows]


def per_second(samples: list[dict], label: str, key: str) -> tuple[list[float], list[float]]:
    """A counter's rate over each interval between two samples (drawn at the interval's end);
    an interval where it went back (a new client's counts: soak's next cycle) is left out."""
    xs, ys = of(samples, label, key)
    pairs = [(x1, (y1 - y0) / (x1 - x0)) for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:]) if x1 > x0 and y1 >= y0]
    return [x for x, _ in pairs], [y for _, y in pairs]


def jitter_p99(samples: list[dict], label: str) -> tuple[list[float], list[float]]:
    """The gateway's heartbeat jitter p99 (ms) over each interval, estimated from its histogram."""
    xs, hists = of(samples, label, "jitter_histogram")
    out = []
    for x, h0, h1 in zip(xs[1:], hists, hists[1:]):
        value = histogram.quantile({float(b): h1[b] - h0.get(b, 0) for b in h1}, 0.99)
        if value is not None:
            out.append((x, value * 1000))
    return [x for x, _ in out], [y for _, y in out]


def cpu_cores(samples: list[dict], label: str) -> tuple[list[float], list[float]]:
    return per_second(samples, label, "cpu_s")


def memory_per_watcher(samples: list[dict], label: str, report: dict | None = None,
                       epoch: float = 0.0) -> tuple[list[float], list[float]]:
    """KiB of the tree's RSS per watcher open, above its RSS before the clients began. With the
    driver's `report` for this series, that is the report's own reading before, and the line ends
    at the window's end on the report's figure, (connected - before) / opened: the table's value."""
    zero = origin(samples, label)
    mine = [s for s in samples if s["series"] == label and s.get("rss_kib") is not None]
    before = [s["rss_kib"] for s in mine if s["t"] < zero] or [s["rss_kib"] for s in mine[:1]]
    if report is None or report.get("server_rss_kib_before") is None or not report.get("opened"):
        rows = [s for s in mine if s["t"] >= zero and s.get("open")]
        return [round(s["t"] - zero, 3) for s in rows], [round((s["rss_kib"] - before[-1]) / s["open"], 2)
                                                         for s in rows]
    base, end = report["server_rss_kib_before"], report["window_ends_at"] - epoch - zero
    rows = [s for s in mine if zero <= s["t"] and s["t"] - zero < end and s.get("open")]
    final = round((report["server_rss_kib_connected"] - base) / report["opened"], 2)
    return ([round(s["t"] - zero, 3) for s in rows] + [round(end, 3)],
            [round((s["rss_kib"] - base) / s["open"], 2) for s in rows] + [final])


def deliveries(samples: list[dict], label: str) -> tuple[list[float], list[float]]:
    xs, ys = per_second(samples, label, "deliveries")
    return (xs, ys) if xs else per_second(samples, label, "server_delivered")


def lost(samples: list[dict], label: str) -> tuple[list[float], list[float]]:
    xs, ys = of(samples, label, "lost")
    return (xs, ys) if any(ys) else of(samples, label, "lost_to_lag")


def replayed(samples: list[dict], label: str) -> tuple[list[float], list[float], str]:
    xs, ys = of(samples, label, "replayed")
    if any(ys):
        return xs, ys, "replay complete (client)"
    xs, ys = of(samples, label, "replays")
    return xs, ys, "replays begun (gateway)"


def latency(run: dict, samples: list[dict]) -> list[tuple[str, dict, tuple[list[float], list[float]]]]:
    """(label, the driver report, (x, y) of the window's p99 as a segment) for each driver report
    in the result; the report's `latency_ms_by_second` holds the per-second points."""
    names = labels(samples)
    out = []
    for report in outcome.runs(run.get("result"), names[0] if names else "run"):
        seconds = [b for b in report["latency_ms_by_second"] if b["count"]]
        if not seconds or "epoch" not in run:
            continue
        zero = run["epoch"] + origin(samples, report["label"] if report["label"] in names else names[0])
        xs = [round(b["at"] - zero, 3) for b in seconds]
        out.append((report["label"], {**report, "xs": xs, "seconds": seconds},
                    ([xs[0] - 1, xs[-1]], [report["latency_ms"]["p99"]] * 2)))
    return out


# --- the charts ---

def _axes(title: str, ylabel: str):
    fig, ax = plt.subplots()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("seconds since the clients began (before 0: the server starting)")
    ax.set_ylabel(ylabel)
    return fig, ax


def _finish(fig, ax) -> bool:
    """Whether anything was drawn (an empty chart is left out)."""
    if not ax.get_lines():
        plt.close(fig)
        return False
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return True


def drawn(ys) -> bool:
    """A series worth a line: some value, and not zero throughout (that is the outcome's to say)."""
    return any(y for y in ys if y is not None)


def charts(run: dict) -> dict:
    """name -> matplotlib Figure, for every chart that has data. Each line's label is the
    series' label (with ` failed`, ` p99`, ... for a second line of the same series)."""
    samples = run["samples"]
    names = labels(samples)
    colours = {label: f"C{i % 10}" for i, label in enumerate(names)}
    out = {}

    def colour(label: str) -> str:
        return colours.setdefault(label, f"C{len(colours) % 10}")

    def chart(name, title, ylabel, lines, extra=()):
        """`lines`: (label, suffix, style, (xs, ys)); a label's legend entry is its first line's."""
        fig, ax = _axes(title, ylabel)
        shown: set[str] = set()
        for label, suffix, style, (xs, ys) in lines:
            if xs and drawn(ys):
                legend = label + suffix if label + suffix not in shown else "_" + label + suffix
                shown.add(label + suffix)
                ax.plot(xs, ys, style, color=colour(label), label=legend, linewidth=1.2)
        if ax.get_lines():
            for draw in extra:
                draw(ax)
        if _finish(fig, ax):
            out[name] = fig

    chart("ramp", "Watchers open (solid) and failed openings (dashed)", "watchers",
          [line for label in names for line in ((label, "", "-", of(samples, label, "open")),
                                                 (label, " failed", "--", of(samples, label, "failed")))])
    chart("deliveries", "Deliveries a second", "deliveries/s",
          [(label, "", "-", deliveries(samples, label)) for label in names])
    chart("latency", "Latency in each second of the window: p50 (solid), p99 (dashed); window p99 (dotted)", "ms",
          [line for label, report, window in latency(run, samples) for line in (
              (label, " p50", "-", (report["xs"], [b["p50"] for b in report["seconds"]])),
              (label, " p99", "--", (report["xs"], [b["p99"] for b in report["seconds"]])),
              (label, " p99 of the window (the table's)", ":", window))])
    chart("cpu", "Server CPU (its whole process tree)", "cores",
          [(name, "", "-", cpu_cores(samples, name)) for name in names])
    reports = {r["label"]: r for r in outcome.runs(run.get("result"), names[0] if names else "run")
               if "window_ends_at" in r and "epoch" in run}
    chart("rss", "Server memory per open watcher (RSS above before the clients began)", "KiB",
          [(name, "", "-", memory_per_watcher(samples, name, reports.get(name), run.get("epoch", 0.0)))
           for name in names],
          [lambda ax: table_memory(ax, run, colour)])
    if run.get("storm"):
        lines = []
        for label in names:
            xs, ys, what = replayed(samples, label)
            lines.append((label, f" ({what})", "-", (xs, ys)))
        chart("replay", "Watchers whose replay is complete", "watchers", lines)
    chart("lost", "Events lost to lag (cumulative)", "events", [(name, "", "-", lost(samples, name)) for name in names])
    chart("jitter", "Heartbeat jitter p99 per interval (estimated from the gateway's histogram, "
          "as Prometheus's histogram_quantile)", "ms", [(name, "", "-", jitter_p99(samples, name)) for name in names])
    return out


def table_memory(ax, run: dict, colour) -> None:
    """The table's memory per watcher for each column, a dotted line across the chart."""
    figures = run.get("figures")
    if not figures:
        return
    names, rows = outcome.summary(figures)
    row = dict(rows).get("memory per watcher KiB")
    systems = {s["system"]: s["series"] for s in run["samples"]}
    for column, (value, source) in zip(names, row or []):
        if isinstance(value, (int, float)):
            series = systems.get(column, next(iter(systems.values()), column))
            ax.axhline(value, linestyle=":", color=colour(series), linewidth=1.2,
                       label=f"{column}: the table's {source}" if column != "value" else f"the table's {source}")


# --- the page ---

def fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }} pre {{ background: #f4f4f4; padding: 8px;
white-space: pre-wrap; }} figure {{ margin: 1.5em 0; }} img.chart {{ max-width: 100%; }}
td small {{ color: #777; }} summary {{ cursor: pointer; font-weight: bold; margin: 1em 0; }}
</style></head><body>
<h1>{title}</h1>
<p>Started {started}. Every chart is also a file beside this page; run.json holds every sample.</p>
<h2>Outcome</h2>
<table id="summary"><thead><tr><th></th>{summary_heads}</tr></thead><tbody>
{summary}
</tbody></table>
<p>Each figure is one of the table's below (its name under it), or computed from them as written.</p>
<h2>Charts</h2>
{charts}
<details id="raw"><summary>Every figure, the command and the machine</summary>
<h2>Figures</h2>
<table id="figures"><thead><tr><th>figure</th>{heads}</tr></thead><tbody>
{rows}
</tbody></table>
<h2>Command</h2><pre id="command">{command}</pre>
<h2>Machine and versions</h2>
<table id="machine"><tbody>
{machine}
</tbody></table>
</details>
</body></html>
"""


def _cell(value, source: str | None = None) -> str:
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    shown = f'<span class="value">{html.escape(fmt(value))}</span>'
    if source is not None:
        shown += f'<br><small class="source">{html.escape(source)}</small>'
        return f'<td{" class=n" if numeric else ""} data-source="{html.escape(source)}">{shown}</td>'
    return f'<td{" class=n" if numeric else ""}>{html.escape(fmt(value))}</td>'


def page(run: dict, svgs: dict[str, bytes]) -> str:
    figures = run["figures"]
    rows = "\n".join(f"<tr><th>{html.escape(str(row[0]))}</th>{''.join(_cell(v) for v in row[1:])}</tr>"
                     for row in figures["rows"])
    names, outcome_rows = outcome.summary(figures)
    summary = "\n".join(f"<tr><th>{html.escape(row)}</th>{''.join(_cell(v, source) for v, source in cells)}</tr>"
                        for row, cells in outcome_rows)
    charts_html = "\n".join(
        f'<figure id="chart-{name}"><img class="chart" alt="{name}" '
        f'src="data:image/svg+xml;base64,{base64.b64encode(svg).decode()}">'
        f'<figcaption><a href="{name}.svg">{name}.svg</a></figcaption></figure>'
        for name, svg in svgs.items())
    about = {**{f"machine: {k}": v for k, v in run["machine"].items()},
             **{f"version: {k}": v for k, v in run["versions"].items()}}
    machine_html = "\n".join(f"<tr><th>{html.escape(k)}</th>{_cell(v)}</tr>" for k, v in about.items())
    return PAGE.format(title=html.escape(f"{run['command']}: load run"), started=html.escape(run["started"]),
                       command=html.escape(run["command_line"]),
                       heads="".join(f"<th>{html.escape(c)}</th>" for c in figures["columns"]),
                       summary_heads="".join(f"<th>{html.escape(c)}</th>" for c in names),
                       summary=summary, rows=rows, charts=charts_html or "<p>No samples were taken.</p>",
                       machine=machine_html)


def svg_bytes(fig) -> bytes:
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def write(directory: str, run: dict) -> str:
    """run.json, the charts and index.html into `directory`; the page's path."""
    os.makedirs(directory, exist_ok=True)
    run = {"machine": machine.machine(), "versions": machine.versions(), **run}
    with open(os.path.join(directory, "run.json"), "wb") as fh:
        fh.write(orjson.dumps(run, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    svgs = {name: svg_bytes(fig) for name, fig in charts(run).items()}
    for name, svg in svgs.items():
        with open(os.path.join(directory, f"{name}.svg"), "wb") as fh:
            fh.write(svg)
    path = os.path.join(directory, "index.html")
    with open(path, "w") as fh:
        fh.write(page(run, svgs))
    return path


def command_line(module: str, argv: list[str] | None) -> str:
    """The exact command as typed: `python -m MODULE ARGS`."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def main(argv: list[str] | None = None) -> int:
    """Draw a kept run again: `python -m loadtest.report RUN_JSON DIR` (its figures, samples,
    command line, machine and versions as recorded; the charts as this module draws them now)."""
    import argparse
    p = argparse.ArgumentParser(description=(main.__doc__ or "").split("\n", 1)[0])
    p.add_argument("run_json", help="a run.json that --report wrote")
    p.add_argument("directory", help="where the page and its charts go")
    args = p.parse_args(argv)
    with open(args.run_json, "rb") as fh:
        print(write(args.directory, orjson.loads(fh.read())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
