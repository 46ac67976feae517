"""When each stream's next heartbeat is due: one heap of due times and one timer on a tick.

Each stream is due at open + k x interval, never reset by events (spec "Heartbeats"). The
heap holds (due, order, stream); one timer serves its earliest entry and fires at most once
per HEARTBEAT_TICK_SECONDS, handing every stream then due to the hub (`on_due`). Streams open
at scattered instants, and a timer per due time (thousands a second with 10,000 watchers)
cost most of an idle worker: with the tick, a heartbeat is late by under a tick. The delay
past its due time when `on_due` runs is the loop's lateness alone, the jitter metric the hub
records; a stream that writes it later (its client not reading) is the hub's to count apart.

A closed stream is not removed from the heap: `on_due` answers False for it when it comes
up, and it is dropped then.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable, Generic, TypeVar

from gateway.tuning import HEARTBEAT_TICK_SECONDS

T = TypeVar("T")


class Heartbeats(Generic[T]):
    def __init__(self, interval: float, on_due: Callable[[T, float], bool]):
        self.interval = interval
        self._on_due = on_due  # (stream, due time) -> whether it stays scheduled
        self._due: list[tuple[float, int, T]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, stream: T) -> None:
        """`stream` opened now: its first heartbeat is one interval away."""
        due = time.monotonic() + self.interval
        heapq.heappush(self._due, (due, next(self._order), stream))
        if self._due[0][2] is stream:
            self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, floor: float = 0.0) -> None:
        self.stop()
        if self._due:
            delay = max(floor, self._due[0][0] - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = time.monotonic()
        due_list = self._due
        while due_list and due_list[0][0] <= now:
            due, _, stream = heapq.heappop(due_list)
            if self._on_due(stream, due):
                heapq.heappush(due_list, (due + self.interval, next(self._order), stream))
        self._arm(HEARTBEAT_TICK_SECONDS)
