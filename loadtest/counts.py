"""The client counts a load run shares through a file: each client process writes its own slot
(opened, failed, deliveries, lost, replayed) and the phase it is in, and a parent (the same
command, or the one that started it: bench, soak) sums them, which loadtest/monitor.py shows
as progress and keeps as samples."""

from __future__ import annotations

import asyncio
import mmap
import os
import struct
import time

PHASES = ("starting", "connecting", "warmup", "window", "replaying", "holding", "settling", "closing", "done")
COUNT_FIELDS = ("opened", "failed", "deliveries", "lost", "replayed")
_HEADER = struct.Struct("<3q")  # phase index, phase end (epoch ms, 0: none), target
_SLOT = struct.Struct(f"<{len(COUNT_FIELDS)}q")


class Counts:
    """Client counters shared through a file: each client process writes its own slot, a
    parent (the same command or the one that started it) sums them."""

    def __init__(self, path: str, slots: int = 0):
        if slots:
            with open(path, "wb") as fh:
                fh.write(bytes(_HEADER.size + slots * _SLOT.size))
        with open(path, "r+b") as fh:
            self.map = mmap.mmap(fh.fileno(), 0)
        self.slots = (len(self.map) - _HEADER.size) // _SLOT.size

    def set_phase(self, phase: str, seconds: float | None = None, target: int | None = None) -> None:
        """The phase the client is in, how long it lasts and (unless None: kept) the watchers wanted."""
        ends = int((time.time() + seconds) * 1000) if seconds else 0
        if target is None:
            target = _HEADER.unpack_from(self.map, 0)[2]
        _HEADER.pack_into(self.map, 0, PHASES.index(phase), ends, target)

    def publish(self, slot: int, tally, replayed: int = 0) -> None:
        """One client process's tally (loadtest/watcher.py's Tally) into its slot. Latency is
        not published: the driver's report carries it by the second, from its own samples."""
        _SLOT.pack_into(self.map, _HEADER.size + slot * _SLOT.size, tally.opened, tally.failed,
                        tally.deliveries, tally.events_lost, replayed)

    def read(self) -> dict:
        phase, ends, target = _HEADER.unpack_from(self.map, 0)
        total = [0] * len(COUNT_FIELDS)
        for slot in range(self.slots):
            total = [a + b for a, b in zip(total, _SLOT.unpack_from(self.map, _HEADER.size + slot * _SLOT.size))]
        counts: dict = dict(zip(COUNT_FIELDS, total))
        counts.update(phase=PHASES[phase], phase_ends=ends / 1000 if ends else None, target=target)
        return counts

    def close(self) -> None:
        self.map.close()


async def keep_published(counts: Counts | None, slot: int, tally, replayed=lambda: 0, every: float = 0.25) -> None:
    """A client process's task: its tally into its slot every `every` seconds (cancel to stop)."""
    while counts is not None:
        counts.publish(slot, tally, replayed())
        await asyncio.sleep(every)


def ready(path: str) -> bool:
    """Whether a client has created its counts at `path` yet (a parent may look first)."""
    try:
        return os.path.getsize(path) > _HEADER.size
    except OSError:
        return False
