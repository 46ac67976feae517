"""Free heap handed back to the system now and then (glibc's `malloc_trim`).

Under load a worker makes short-lived buffers larger than pymalloc's 512-byte blocks: shared
batches, chunks a slow reader's transport holds until it drains, replays for new watchers.
glibc keeps what they freed in its heap, so a worker's RSS stays at the high-water mark of its
busiest moment: measured 1.3–24 KiB of free heap per watcher at 1,000 watchers × 100
events/s, more than its live objects (loadtest/RESULTS.md, run 4). Trimming every few seconds
returns those pages; it frees nothing that is in use. Elsewhere than glibc, nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
from typing import Callable

from gateway import tuning


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


class Trimmer:
    """One timer on the worker's loop: `malloc_trim(0)` every `interval` seconds."""

    def __init__(self, interval: float = tuning.HEAP_TRIM_SECONDS):
        self.interval = interval
        self.trim = _malloc_trim()
        self.timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # read once (on Python 3.11 a getpid each time)

    def start(self) -> None:
        if self.trim is not None:
            self.loop = self.loop or asyncio.get_running_loop()
            self.timer = self.loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        if self.trim is not None:  # start() runs the timer only then
            self.trim(0)
        self.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
