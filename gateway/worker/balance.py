"""Which worker accepts a new connection: the accept balance between a gateway's workers.

Every worker waits on the one shared accept queue and every one idle in epoll is woken for a
new connection, so without a policy the first to run takes it: on an idle gateway one worker
took every stream (measured: 30 of 30), and under a gathering a worker at its
--max-connections accepted and answered 503 while its siblings had room (loadtest/RESULTS.md:
281 of 100,000 watchers refused so). Before each readable event the worker's accept loop
(gateway/worker/http/accept.py) asks `Balance.burst` how many connections to take, from
every worker's places in the shared metric blocks (metrics.Counters.places_by_worker):

- full (its places all taken) while a sibling has room and that sibling's loop turns: none,
  for as long as that holds; it never accepts to refuse a connection a sibling would serve;
- full, and every sibling with room silent (its beat word, gateway/common/stall.py, stood
  still for SIBLING_SILENT_SECONDS: stopped by a signal, stuck until the supervisor replaces
  it, or not yet serving): a whole burst, each answered 503 with Retry-After at the door
  (requests_refused_total{reason="capacity"}); room on paper that no loop takes would hold the
  connections in the kernel's queue, unanswered, for as long as that sibling stays so;
- holding more than BALANCE_SLACK streams beyond a serving sibling whose loop turns (a worker
  down or not yet started has a cleared block; a silent one takes nothing): none, once
  (DEFER_SECONDS), so a sibling woken by the same event takes it; still queued then, it takes it;
- otherwise up to its room (ACCEPT_BURST at most); when no sibling has room (every worker
  full, or it serves alone), a whole burst: beyond its limit each is answered 503, not left
  in the queue.

A place is taken from the moment a connection is accepted: it counts in the worker's
connections_idle from its accept (`accepted`), through its TLS handshake (up to
--header-timeout), and on as the front's (which takes the count over when its transport is
made; `dropped` gives it back if none is), so its siblings see that room gone as soon as this
worker does, and never see it counted twice (a full sibling would then refuse what this worker
had room for).

A sibling's silence is this worker's own reading of its beat word: the value it last saw and
when that value changed, on this worker's monotonic clock (no clocks shared; a first look counts
as a move, so a connection waits about SIBLING_SILENT_SECONDS at most for a sibling already
stopped when this worker filled). The words are
read only when the answer depends on them (this worker full, or ahead of a sibling), never on
the path of a worker with room and no one behind it.
"""

from __future__ import annotations

import time
from typing import Callable

from gateway.common.board import Board
from gateway.common.metrics import IDLE_GAUGE, Counters
from gateway.tuning import ACCEPT_BURST, BALANCE_SLACK, SIBLING_SILENT_SECONDS


class Balance:
    """One worker's side of the balance (its index among the workers' blocks and beat words)."""

    __slots__ = ("counters", "board", "index", "clock", "seen")

    def __init__(self, counters: Counters, board: Board, index: int,
                 clock: Callable[[], float] = time.monotonic):
        self.counters, self.board, self.index, self.clock = counters, board, index, clock
        self.seen: dict[int, tuple[int, float]] = {}  # sibling -> (its beat word, when it was seen to move)

    def burst(self, deferred: bool) -> int:
        """How many connections to accept now (0: step back); `deferred`: it stepped back from
        the last readable event."""
        places, index = self.counters.places_by_worker(), self.index
        streams, taken, limit = places[index]
        roomy = [i for i, (_, o_taken, o_limit) in enumerate(places) if o_taken < o_limit and i != index]
        if taken >= limit:
            return 0 if any(map(self.turning, roomy)) else ACCEPT_BURST
        if not roomy:
            return ACCEPT_BURST
        behind = streams - BALANCE_SLACK  # a sibling under this is behind (never this worker itself)
        if not deferred and any(o_limit and o_streams < behind and self.turning(i)  # a cleared block: not serving
                                for i, (o_streams, _, o_limit) in enumerate(places)):
            return 0
        return min(ACCEPT_BURST, limit - taken)

    def turning(self, sibling: int) -> bool:
        """Whether `sibling`'s beat word moved within SIBLING_SILENT_SECONDS, as this worker saw it
        (the first look, or a move since the last, starts its count again)."""
        beat, now = self.board.beats(sibling), self.clock()
        seen = self.seen.get(sibling)
        if seen is None or seen[0] != beat:
            self.seen[sibling] = (beat, now)
            return True
        return now - seen[1] < SIBLING_SILENT_SECONDS

    def accepted(self) -> None:
        """A connection accepted: a place taken, its siblings see (the front takes the count over)."""
        self.counters.add(IDLE_GAUGE)

    def dropped(self) -> None:
        """A connection accepted went before any front was made for it: its place is free again."""
        self.counters.sub(IDLE_GAUGE)
