"""The lapped-replay budget: what replays that cannot keep up keep alive in a worker, bounded in bytes.

A replay reads its view of the window (window.Replay): the entries up to the head when its
request was read, held by reference until its last replayed event is written (protocol/lag.py:
the replay is the buffer as it was then, written whole). The window itself holds the ring's
last `slots` events whatever any stream does; an entry the ring has written past is gone from
the window, and is kept alive only by the views that still hold it. A stream whose view the
ring has lapped (`Stream.replay_lapped`: the window no longer holds the entry it owes next)
is one that cannot keep up with the ring; its view is a lapped view.

The rule, judged by memory, never by how fast a stream reads: the entries that lapped views
keep alive beyond the window (each counted once, however many views share it: `Entry.size`)
may take at most the worker's budget (`--max-lapped-replay-bytes`). The hub measures them
every tuning.LAPPED_CHECK_SECONDS while a replay is open (hub.py); past the budget, the
lapped streams of the oldest lapped views end (access reason "lapped", `over_budget`), until
the newest lapped views left fit within it. So a stream whose view the ring has not lapped
is never cut, however slowly it reads, and a lapped one is not while the budget holds. The
views of streams the ring has not lapped keep alive beyond the window at most the lap just
before it (such a stream owes an entry the window holds, so its view opened within the last
lap), whatever their count.

Views are all `slots` entries long and each opens at the head of its time, so a newer view
starts and ends later than an older one: what a view adds to the newer views' entries is the
part of its range below theirs. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.worker.delivery.drivers import Served
    from gateway.worker.delivery.window import Replay, Window


def over_budget(replaying: Iterable[Served], window: Window, budget: int) -> list[Served]:
    """The streams to end now: the lapped ones (not already ended) whose views, counted from
    the newest back, no longer fit in `budget` bytes beyond the window."""
    lapped: dict[Replay, list[Served]] = {}
    for served in replaying:
        stream = served.stream
        if served.ended_by is None and stream.replay is not None and stream.replay_lapped(window):
            lapped.setdefault(stream.replay, []).append(served)
    if not lapped:
        return []
    gone = window.head - window.slots  # the newest id the window no longer holds
    held, below = 0, gone + 1  # bytes counted so far; the oldest id they cover
    ending: list[Served] = []
    for view in sorted(lapped, key=lambda view: view.head, reverse=True):
        if held <= budget:
            for event_id in range(view.first, min(view.head, gone, below - 1) + 1):
                entry = view.entry(event_id)
                if entry is not None:
                    held += entry.size
            below = min(below, view.first)
        if held > budget:
            ending += lapped[view]
    return ending
