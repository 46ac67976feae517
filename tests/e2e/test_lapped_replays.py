"""Replays that cannot keep up with the ring, over real sockets against a real one-worker
gateway: what their lapped views keep alive is bounded by the worker's budget
(--max-lapped-replay-bytes; gateway/worker/delivery/lapped.py), judged by memory, never by how
fast a client reads. Readers read slowly on threads of their own (a few KB a second, paced by
what they have read, not by a clock the gateway sees); every wait is on a condition.
"""

from __future__ import annotations

import contextlib
import threading
import time

from helpers.gateway_harness import running_gateway, wait_for
from helpers.http_client import rpc, user_message
from helpers.sse_reading import WATCH, SSEStream, frame_of, is_terminal_event, task_id_of

SIZE = 4000  # a burst frame's text: an entry and its one cached join hold ~9 KB, a view of 512 ~4.6 MB
LAP = 512  # the ring's slots: a burst of this many frames laps it
BUDGET = 7_000_000  # one lapped view fits, two do not


def burst(port: int, frames: int, size: int = SIZE) -> int:
    """A burst task of `frames` padded frames, written; the id of its terminal status, read
    by a probe replaying the buffer (which joins every entry once, as the readers' own)."""
    status, _, answer = rpc(port, "SendMessage", user_message(f"/scenario burst n={frames} size={size}"))
    assert status == 200, answer
    task_id = answer["result"]["task"]["id"]
    with SSEStream(port, WATCH, last_event_id="0", timeout=60) as probe:
        seen = probe.read_until(lambda e: e.id is not None and task_id_of(e) == task_id and is_terminal_event(e),
                                within=60)
    return seen[-1].id


class SlowReader:
    """A watcher replaying from 0 that reads at most `rate` bytes a second on a thread of its
    own, until it is told to read fast (`hurry`), its stream ends, or it has read id `stop_at`."""

    def __init__(self, port: int, rate: float, stop_at: int | None = None):
        self.stream = SSEStream(port, WATCH, rcvbuf=4096, last_event_id="0", timeout=60)
        assert self.stream.status == 200
        self.rate, self.stop_at = rate, stop_at
        self.ids: list[int] = []
        self.frames: list[dict] = []
        self.ended = False
        self.fast = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        started = time.monotonic()
        with contextlib.suppress(OSError):
            while (event := self.stream.next()) is not None:
                if event.id is not None:
                    self.ids.append(event.id)
                    if self.stop_at is not None and event.id >= self.stop_at:
                        return
                elif event.data is not None:
                    self.frames.append(frame_of(event.data))
                if not self.fast.is_set():
                    time.sleep(max(0.0, started + len(self.stream.raw) / self.rate - time.monotonic()))
        self.ended = True

    def hurry(self) -> None:
        self.fast.set()

    def close(self) -> None:
        self.fast.set()
        self.stream.close()
        self.thread.join(30)


def stream_ends(gateway, reason: str) -> int:
    return sum(1 for r in gateway.logs() if r.get("event") == "stream end" and r.get("reason") == reason)


def test_six_slow_replayers_a_lap_apart_are_held_to_the_budget():
    """[claim: lapped-replay] Six watchers replay from 0, opened a lap of the ring apart, each
    reading ~8 KB/s (far slower than the ring laps): each is lapped by the next lap. With room
    for one lapped view in the budget, each new lap ends the one before (reason "lapped"): the
    five oldest end, their sockets closed once they have read what was in flight, and the
    newest, lapped too, stays open while it fits, and reads its whole replay in order."""
    with running_gateway("--max-lapped-replay-bytes", str(BUDGET), workers=1) as gateway:
        head = burst(gateway.port, LAP)
        readers: list[SlowReader] = []
        try:
            for _ in range(6):
                opened_at = head  # its replay's end: nothing is written between
                readers.append(SlowReader(gateway.port, rate=8000, stop_at=opened_at))
                head = burst(gateway.port, LAP)  # laps the reader just opened
            wait_for(lambda: stream_ends(gateway, "lapped") == 5, 30, "five lapped replays ended")
            for reader in readers:
                reader.hurry()
            for reader in readers[:5]:
                wait_for(lambda reader=reader: reader.ended, 30, "an ended replay's socket closed")
            newest = readers[5]
            newest.thread.join(60)
            assert not newest.ended and newest.ids[-1] == opened_at
            assert newest.frames[1]["frame"] == "gap"
            assert newest.ids == list(range(newest.frames[1]["firstAvailableId"], opened_at + 1))  # whole
            assert stream_ends(gateway, "lapped") == 5
        finally:
            for reader in readers:
                reader.close()


def test_a_steady_slow_reader_is_never_cut_while_the_budget_holds():
    """A watcher replays from 0 on a full ring and reads a steady ~40 KB/s while the ring laps
    its view every few seconds: each 64 KiB piece takes it longer than a heartbeat interval to
    read, yet it reads on. Under the default budget it is never cut: it reads its whole replay,
    then live events (the oldest beyond 128 named lost), and its stream is still open."""
    with running_gateway(workers=1, heartbeat=0.5) as gateway:
        opened_at = burst(gateway.port, LAP, size=500)
        status, _, answer = rpc(gateway.port, "SendMessage",
                                user_message("/scenario burst n=1000000 size=500 pause=0.1"))
        assert status == 200, answer
        reader = SlowReader(gateway.port, rate=40_000)
        try:
            wait_for(lambda: reader.ended or any(frame["frame"] == "lagged" for frame in reader.frames), 120,
                     "its replay read whole, then a live event lost")
            ends = [r.get("reason") for r in gateway.logs() if r.get("event") == "stream end"]
            assert not reader.ended, f"cut after {len(reader.ids)} events; stream ends: {ends}"
            first = reader.frames[1]["firstAvailableId"]
            assert reader.ids[:LAP] == list(range(first, first + LAP)) and first + LAP - 1 >= opened_at  # whole
            assert not reader.ended
            assert "lapped" not in ends and "stalled" not in ends
        finally:
            reader.close()
