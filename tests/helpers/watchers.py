"""Watchers read in the background for the tests: `Recorder` notes each id, heartbeat and
frame of a watch stream with the time it was read; the checks that every hole is announced
by a lagged frame and that resumed watchers fill what they lost."""

from __future__ import annotations

import threading
import time

from helpers.gateway_harness import wait_for
from helpers.sse_reading import SSEStream, WATCH, item


class Recorder(threading.Thread):
    """Reads one watch stream in the background: (monotonic time, id or 'hb' or frame name)."""

    def __init__(self, stream: SSEStream):
        super().__init__(daemon=True)
        self.stream = stream
        self.seen: list[tuple[float, object]] = []
        self.lost = False
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                event = self.stream.next()
                if event is None:
                    self.lost = True
                    return
                now = time.monotonic()
                if event.data is None:
                    self.seen.append((now, "hb"))
                elif event.id is not None:
                    self.seen.append((now, event.id))
                else:
                    frame = item(event).frame
                    self.seen.append((now, (frame["frame"], frame.get("missed", frame.get("firstAvailableId")))))
        except OSError:
            self.lost = True

    def ids(self) -> list[int]:
        return [what for _, what in self.seen if isinstance(what, int)]

    def missed(self) -> int:
        return sum(what[1] for _, what in self.seen if isinstance(what, tuple) and what[0] == "lagged")


def ids_explained(recorder: Recorder, first: int = 1) -> None:
    """Strictly ascending ids from `first` (or a gap's firstAvailableId) whose holes are all
    accounted for by lagged frames."""
    gaps = [what[1] for _, what in recorder.seen if isinstance(what, tuple) and what[0] == "gap"]
    first = gaps[0] if gaps else first
    ids = recorder.ids()
    assert ids == sorted(set(ids))
    holes = ids[0] - first + sum(b - a - 1 for a, b in zip(ids, ids[1:]))
    assert holes == recorder.missed(), (holes, recorder.missed())


def start_watchers(port: int, n: int, *, spread_over: set[int] = frozenset(), **kw) -> list[Recorder]:
    """n watchers, and more (up to 4n) until every worker pid in `spread_over` serves one."""
    recorders = []
    while len(recorders) < n or (not spread_over <= {r.stream.worker_pid for r in recorders}
                                 and len(recorders) < 4 * n):
        stream = SSEStream(port, WATCH, {}, timeout=30, **kw)
        recorder = Recorder(stream)
        recorder.start()
        recorders.append(recorder)
    return recorders


def resume(port: int, lost: list[Recorder]) -> list[Recorder]:
    """Reconnect each lost watcher with the last id it saw: the replay is to fill the hole."""
    resumed = []
    for r in lost:
        again = Recorder(SSEStream(port, WATCH, {}, last_event_id=str(r.ids()[-1]), timeout=30))
        again.seen = list(r.seen)
        again.start()
        resumed.append(again)
    return resumed


def assert_gapless_to(target: int, recorders: list[Recorder]) -> None:
    """Every recorder reaches `target` with each id from its first one, once: nothing lost,
    nothing repeated."""
    wait_for(lambda: all(r.ids() and r.ids()[-1] >= target for r in recorders),
             timeout=20, what="every watcher past the same id")
    for r in recorders:
        ids = [i for i in r.ids() if i <= target]
        assert ids == list(range(ids[0], target + 1))


def stop_all(recorders: list[Recorder]) -> None:
    for recorder in recorders:
        recorder.stop.set()
        recorder.stream.http.close()
    for recorder in recorders:
        recorder.join(5)
