"""What a load run is doing while it runs, and the samples its report draws (issue #43).

Every command of the kit (bench, storm, crowd, openings, idle20k, soak, driver) keeps one
`Monitor`: a thread that twice a second samples each server it follows and shows one line of
progress per server: the phase (starting, connecting, warmup, window, ...), watchers open of
the target, events a second, failures so far, and the time left in the phase. Nothing is
estimated; each figure is read from

- the client's own counts: the driver's (and the storm's) client processes publish their
  tallies into a small shared file (loadtest/counts.py, one slot per process, with the phase the
  client is in), which a parent command reads even when the driver is its subprocess;
- the gateway's `/metrics` (`murgw_connections_open`, `murgw_events_delivered_total`,
  `murgw_events_lost_to_lag_total`, the heartbeat jitter histogram), which is also what a
  run read by csse (which reports only at its end) shows while it runs;
- nginx+nchan's `nchan_stub_status` (its subscribers);
- the server's process tree in /proc (CPU seconds, RSS).

The progress is drawn with rich when stderr is a terminal, as one plain line every few seconds
otherwise (CI, a pipe), and not at all with `--quiet`. The samples are kept for the report
(`loadtest/report.py`, `--report DIR`), which loadtest/run_report.py writes at a run's end.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import urllib.request
from typing import TYPE_CHECKING

from gateway.bench_surface import cpu_seconds, process_tree, rss_kib
from loadtest.counts import COUNT_FIELDS, Counts, ready

if TYPE_CHECKING:
    from rich.progress import TaskID  # rich is imported when a terminal draws the progress

def scrape_metrics(port: int) -> dict:
    """The gateway's series this view and the report use: summed over their labels, the
    heartbeat jitter histogram by bound (cumulative)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    found: dict = {"open": 0.0, "delivered": 0.0, "lost_to_lag": 0.0, "replays": 0.0, "jitter": {}}
    names = {"murgw_connections_open{": "open", "murgw_events_delivered_total{": "delivered",
             "murgw_events_lost_to_lag_total{": "lost_to_lag", 'murgw_replays_total{outcome="replayed"': "replays"}
    for line in text.splitlines():
        if line.startswith("murgw_heartbeat_jitter_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            found["jitter"][bound] = float(line.rsplit(" ", 1)[1])
            continue
        for prefix, key in names.items():
            if line.startswith(prefix):
                found[key] += float(line.rsplit(" ", 1)[1])
    return found


def scrape_nchan(port: int) -> dict:
    """nginx+nchan's `nchan_stub_status` (the bench's nginx serves it at /nchan_status)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/nchan_status", timeout=2).read().decode()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {"open": float(fields.get("subscribers", "0").strip() or 0),
            "published": float(fields.get("total published messages", "0").strip() or 0)}


class Followed:
    """One server the monitor samples, and the client's counts beside it: a `Counts`, or the
    path a client subprocess creates its counts at (a client that keeps none, csse, never does)."""

    def __init__(self, label: str, pid: int = 0, metrics_port: int | None = None, nchan_port: int | None = None,
                 counts: Counts | str | None = None, system: str = ""):
        self.label, self.pid, self.metrics_port, self.nchan_port = label, pid, metrics_port, nchan_port
        self._counts, self.system = counts, system or label.split()[0]
        self.last: dict | None = None
        self.rate = 0.0

    @property
    def counts(self) -> Counts | None:
        if isinstance(self._counts, str):
            if not ready(self._counts):
                return None
            self._counts = Counts(self._counts)
        return self._counts

    @counts.setter
    def counts(self, counts: Counts | str | None) -> None:
        """Follow other counts from now on (soak: a new driver each cycle)."""
        self._counts = counts


class Monitor:
    """Samples every followed server each `every` seconds and shows the progress (see above)."""

    def __init__(self, command: str, quiet: bool = False, every: float = 0.5, plain_every: float = 5.0,
                 stream=None):
        """`command` names its lines; `every` the seconds between samples, `plain_every` between plain lines."""
        self.command, self.quiet, self.every, self.plain_every = command, quiet, every, plain_every
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.epoch = time.time()  # the same instant on the wall clock: a sample's t is seconds from here
        self.samples: list[dict] = []
        self.followed: list[Followed] = []
        self._phase_ends: float | None
        self._phase, self._phase_ends, self._target = "starting", None, 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="monitor")
        self._printed = 0.0
        self._rich = None
        if not quiet and self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn
            self._rich = Progress(TextColumn("{task.description}"), BarColumn(),
                                  TextColumn("{task.completed:,.0f}/{task.total:,.0f} open  {task.fields[rest]}"),
                                  console=Console(file=self.stream), refresh_per_second=4)
            self._tasks: dict[str, TaskID] = {}

    # --- what the command tells it ---

    def phase(self, name: str, seconds: float | None = None, target: int | None = None) -> None:
        """The command's phase now; `seconds` its length (for the time left), `target` the watchers."""
        with self._lock:
            self._phase = name
            self._phase_ends = time.monotonic() + seconds if seconds else None
            if target is not None:
                self._target = target

    def follow(self, label: str, **how) -> Followed:
        followed = Followed(label, **how)
        with self._lock:
            self.followed.append(followed)
        return followed

    def unfollow(self, followed: Followed) -> None:
        self._sample(followed)  # its last figures
        with self._lock:
            self.followed.remove(followed)
        self._show([followed], last=True)  # its outcome stays on a terminal, and a pipe gets it too

    @contextlib.contextmanager
    def following(self, label: str, **how):
        followed = self.follow(label, **how)
        try:
            yield followed
        finally:
            self.unfollow(followed)

    def __enter__(self):
        if self._rich is not None:
            self._rich.start()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stopping.set()
        self._thread.join(10)
        if self._rich is not None:
            self._rich.stop()

    # --- the sampling thread ---

    def _run(self) -> None:
        while not self._stopping.wait(self.every):
            with self._lock:
                followed = list(self.followed)
            for each in followed:
                self._sample(each)
            self._show(followed)

    def _sample(self, each: Followed) -> None:
        now = time.monotonic()
        sample = {"t": round(now - self.started, 3), "series": each.label, "system": each.system, "phase": self._phase}
        counts = each.counts.read() if each.counts is not None else None
        if counts is not None:
            sample.update({key: counts[key] for key in COUNT_FIELDS})
            if counts["phase"] != "starting":
                sample["phase"] = counts["phase"]
            sample["open"] = counts["opened"]
        if each.pid:
            family = process_tree(each.pid)
            if family:
                sample.update(cpu_s=round(cpu_seconds(family), 3), rss_kib=rss_kib(family))
        with contextlib.suppress(OSError, ValueError):
            if each.metrics_port:
                metrics = scrape_metrics(each.metrics_port)
                sample.update(server_open=metrics["open"], server_delivered=metrics["delivered"],
                              lost_to_lag=metrics["lost_to_lag"], replays=metrics["replays"],
                              jitter_histogram=metrics["jitter"])
            elif each.nchan_port:
                sample.update(server_open=scrape_nchan(each.nchan_port)["open"])
        sample.setdefault("open", sample.get("server_open"))
        delivered = sample.get("deliveries", sample.get("server_delivered"))
        if each.last is not None and delivered is not None:
            before = each.last.get("deliveries", each.last.get("server_delivered"))
            if before is not None and sample["t"] > each.last["t"]:
                each.rate = (delivered - before) / (sample["t"] - each.last["t"])
        each.last = sample
        with self._lock:
            self.samples.append(sample)

    def _status(self, each: Followed) -> tuple[int, int, str]:
        """(open, target, the rest of the line: phase, events/s, failures, time left) now."""
        sample = each.last or {}
        counts = each.counts.read() if each.counts is not None else {}
        client = counts.get("phase", "starting") != "starting"
        phase = counts["phase"] if client else self._phase
        ours = self._phase_ends - time.monotonic() if self._phase_ends else None
        left = (counts["phase_ends"] - time.time() if counts.get("phase_ends") else None) if client else ours
        target = counts.get("target") or self._target
        rest = f"{phase}  {each.rate:,.0f} ev/s  failed {sample.get('failed', 0) or 0:,}"
        if left is not None:
            rest += f"  {max(0.0, left):.0f} s left"
        if client and ours is not None:  # the command's own phase, around the client's (soak's minutes)
            rest += f"  ({self._phase}: {max(0.0, ours):.0f} s left)"
        return int(sample.get("open") or 0), int(target or 0), rest

    def _show(self, followed: list[Followed], last: bool = False) -> None:
        """Update the rich display, or print a plain line each `plain_every` seconds (and a
        server's `last` one as it is let go)."""
        if self.quiet:
            return
        if self._rich is not None:
            for each in followed:
                opened, target, rest = self._status(each)
                if each.label not in self._tasks:
                    self._tasks[each.label] = self._rich.add_task(each.label, total=max(target, 1), rest="")
                self._rich.update(self._tasks[each.label], completed=opened, total=max(target, opened, 1), rest=rest)
            return
        now = time.monotonic()
        if now - self._printed < self.plain_every and not last:
            return
        if not last:
            self._printed = now
        for each in followed:
            opened, target, rest = self._status(each)
            print(f"[{self.command} {now - self.started:5.0f}s] {each.label}: open {opened:,}/{target:,}  {rest}",
                  file=self.stream, flush=True)
