"""A load run's outcome, the first thing its page shows: a few figures per server, side by side.

Each summary cell is one of the run's own figures (its table: `figures` in run.json), found by
the name its row has there, or, where the table has none, computed from that column's figures
by a rule written here (`COMPUTED`). Every cell keeps its source (a figure's name, or the
rule), which the page shows beside it: the summary restates the table, never a second
measurement. `runs` finds the driver reports inside a command's result (the driver's own, each
of bench's, each soak cycle): the report's latency and memory charts draw from them.
"""

from __future__ import annotations

# (the summary's row, the table's figure names that give it: the first the column has wins;
# a name also matches the rows that begin with it and a space: bench's "events lost @ 200")
ROWS = (
    ("watchers opened", ("opened", "connected", "median opened", "watchers opened of")),
    ("openings failed", ("failed", "failed_connections")),
    ("every id exact", ("exact",)),
    ("events lost", ("events_lost", "events_missed", "events lost @")),
    ("latency p99 ms", ("latency_ms.p99", "latency p99 ms @", "summary.latency_p99_ms.last")),
    ("server CPU", ("server CPU s / M deliveries @", "median server CPU µs / opening", "server_cpu_s",
                    "server_cpu_window_s")),
    ("memory per watcher KiB", ("RSS KiB / idle watcher @", "median RSS KiB / stream", "rss_kib_per_watcher",
                                "per_watcher_kib.rss")),
)


def _exact(figures: dict):
    holes = figures.get("unexplained_holes", figures.get("ids_holes"))
    disorder = figures.get("order_violations", figures.get("ids_nonascending"))
    if holes is None or disorder is None:
        return None
    return holes == 0 and disorder == 0


def _memory_per_watcher(figures: dict):
    before, after, opened = (figures.get(k) for k in ("server_rss_kib_before", "server_rss_kib_connected", "opened"))
    if before is None or after is None or not opened:
        return None
    return round((after - before) / opened, 2)


# Where the table has no row for a summary row: (the rule, as the page names it, and its function).
COMPUTED = {
    "every id exact": ("unexplained holes = 0 and order violations = 0", _exact),
    "memory per watcher KiB": ("(server_rss_kib_connected − server_rss_kib_before) / opened", _memory_per_watcher),
}


def columns(figures: dict) -> dict[str, dict]:
    """The table as column -> {figure name: value}."""
    names = figures["columns"]
    return {name: {row[0]: row[1 + i] for row in figures["rows"]} for i, name in enumerate(names)}


def _found(column: dict, names: tuple[str, ...]) -> str | None:
    for name in names:
        match = name if column.get(name) is not None else next(
            (key for key in column if key.startswith(name + " ") and column[key] is not None), None)
        if match is not None:
            return match
    return None


def _ran(column: dict) -> bool:
    """Whether the column has any figure (bench's table keeps a column for a system not run)."""
    return any(value is not None and str(value).strip("–/ ") for value in column.values())


def summary(figures: dict) -> tuple[list[str], list[tuple[str, list[tuple[object, str]]]]]:
    """(the columns of servers that ran, [(row, [(value, source) per column])]): the rows some
    column has a value for."""
    table = {name: column for name, column in columns(figures).items() if _ran(column)}
    out = []
    for row, names in ROWS:
        cells = []
        for column in table.values():
            source = _found(column, names)
            if source is not None:
                cells.append((column[source], source))
            elif row in COMPUTED:
                rule, compute = COMPUTED[row]
                value = compute(column)
                cells.append((value, rule if value is not None else ""))
            else:
                cells.append((None, ""))
        if any(value is not None for value, _ in cells):
            out.append((row, cells))
    return list(table), out


def runs(result, fallback: str) -> list[dict]:
    """Every driver report inside `result` (one that has `latency_ms_by_second`), each with a
    `label` (its own, else `fallback`)."""
    found = []

    def walk(value) -> None:
        if isinstance(value, dict):
            if "latency_ms_by_second" in value:
                found.append({**value, "label": value.get("label") or fallback})
                return
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(result)
    return found
