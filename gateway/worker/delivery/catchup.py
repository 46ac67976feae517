"""Streams behind the head, written one bounded piece at a time, at a pace the loop can carry.

A stream whose last write left it behind (its replay, or a catch-up longer than one piece,
window.PIECE_BYTES) and whose transport is still under its high-water mark waits here for its
next piece; one that is over the mark drains first (its driver waits: drivers.py), then
queues again. Each run writes one piece for each stream queued when it began, round-robin,
until TURN_BUDGET_SECONDS of the thread's CPU time is spent (CPU, not wall time: a worker
preempted on a shared core would otherwise write a few pieces a turn), then gives the loop
back: it polls its sockets and runs its timers (heartbeats, the stall pulse) before the next
run. However many watchers replay at once (a reconnect storm), no callback
holds the loop much longer than one budget plus one piece, and a heartbeat due meanwhile is
written between two pieces (hub.py: a queued stream's heartbeat never waits for its turn).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable, Generic, Protocol, TypeVar

from gateway.tuning import TURN_BUDGET_SECONDS


class Queued(Protocol):
    queued: bool


Q = TypeVar("Q", bound=Queued)  # the hub's record of a stream (drivers.Served)


class CatchUp(Generic[Q]):
    """A FIFO of streams wanting their next piece, and the one callback that writes them."""

    def __init__(self, write: Callable[[Q], int], after_run: Callable[[int], None]):
        self._write = write  # (stream) -> 1 when a piece was written; it may add the stream again
        self._after_run = after_run  # (pieces written): the hub counts what the run took
        self._queue: deque[Q] = deque()
        self._run_handle: asyncio.Handle | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, stream: Q) -> None:
        if stream.queued:
            return
        stream.queued = True
        self._queue.append(stream)
        if self._run_handle is None:
            self._run_handle = asyncio.get_running_loop().call_soon(self._run)

    def stop(self) -> None:
        if self._run_handle is not None:
            self._run_handle.cancel()
            self._run_handle = None

    def _run(self) -> None:
        # `_run_handle` stays set while this runs: a stream added back meanwhile waits for the
        # one next run, scheduled below, not for a second run in the same turn.
        queue, write = self._queue, self._write
        deadline = time.thread_time() + TURN_BUDGET_SECONDS  # CPU time: see above
        written = 0
        for _ in range(len(queue)):  # those queued now: one added back waits for the next run
            stream = queue.popleft()
            stream.queued = False
            written += write(stream)
            if time.thread_time() >= deadline:
                break
        self._run_handle = asyncio.get_running_loop().call_soon(self._run) if queue else None
        self._after_run(written)
