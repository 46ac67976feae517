"""A run's `--report` and `--quiet`, the same on every command of the kit: the options, where
the report goes, a command's result as a table of figures, and the report written at the run's
end from the result and the samples its `Monitor` took (loadtest/monitor.py draws the progress,
loadtest/report.py the page)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadtest.monitor import Monitor

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")  # every run's results (git-ignored)


def add_options(parser: argparse.ArgumentParser) -> None:
    """--report and --quiet, the same on every command."""
    parser.add_argument("--report", nargs="?", const="", metavar="DIR",
                        help="write the run's page (index.html), its charts (SVG) and run.json to DIR "
                             "(default with no DIR: loadtest/out/COMMAND-TIME/)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--progress-every", type=float, default=5.0, metavar="SECONDS",
                        help="when stderr is no terminal: a plain progress line this often (default 5)")


def report_dir(command: str, option: str | None) -> str | None:
    """Where --report writes: DIR, or a new folder under loadtest/out/ for a bare --report."""
    if option is None:
        return None
    return option or os.path.join(OUT, f"{command}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")


def flatten(result: dict) -> dict:
    """A command's JSON result as figure -> value: numbers, strings and booleans, nested dicts
    named `outer.inner`; lists are left to run.json."""
    flat = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif value is None or isinstance(value, (int, float, str, bool)):
            flat[prefix] = value

    walk("", result)
    return flat


def side_by_side(results: dict[str, dict]) -> dict:
    """A table with a column per result (the gateway, each peer), a row per figure any has."""
    flat = {name: flatten(result) for name, result in results.items()}
    figures = list(dict.fromkeys(key for one in flat.values() for key in one))
    return {"columns": list(results), "rows": [[key, *(one.get(key) for one in flat.values())] for key in figures]}


def finish(monitor: Monitor, args, module: str, argv: list[str] | None, started: str, result,
           figures: dict | None = None, storm: bool = False) -> None:
    """With --report: the run's page, charts and run.json (loadtest/report.py); the table of
    figures is `figures` (columns, rows), else the result's own numbers."""
    directory = report_dir(module.rsplit(".", 1)[-1], getattr(args, "report", None))
    if directory is None:
        return
    from loadtest import report  # matplotlib: only a run that draws needs it
    if figures is None:
        figures = side_by_side({"value": result})
    path = report.write(directory, {"command": module, "command_line": report.command_line(module, argv),
                                    "started": started, "epoch": monitor.epoch, "storm": storm,
                                    "figures": figures, "result": result,
                                    "samples": monitor.samples})
    print(f"report: {path}", file=sys.stderr, flush=True)


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
