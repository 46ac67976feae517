"""Stream openings at the pace the loop can carry: at most OPENINGS_PER_TURN a turn of the event loop.

In a reconnect storm a worker accepts up to ACCEPT_BURST connections a readable event
(http/accept.py), and their requests arrive together, so dozens of openings would run
their stream's set-up (the replay plan, the stream, its response head) in one turn of the loop:
in a 10,000-watcher storm the request path was a third of the worker's CPU (py-spy,
loadtest/RESULTS.md), two thirds of it past this point. The gate lets OPENINGS_PER_TURN through a turn;
the rest wait in arrival order, and the loop runs its timers (heartbeats, the stall pulse),
its I/O and the catch-up queue between. A storm's openings are delayed, never refused here
(the per-worker limit still answers 503 at --max-connections); a lone opening passes at once.
"""

from __future__ import annotations

import asyncio
from collections import deque

from gateway.tuning import OPENINGS_PER_TURN


class OpeningPace:
    """The gate every stream opening of a worker passes (opening.py, `Openings.open`)."""

    def __init__(self) -> None:
        self._admitted = 0  # this turn
        self._waiting: deque[asyncio.Future] = deque()
        self._next_turn: asyncio.Handle | None = None

    async def admit(self) -> None:
        """Return when this opening may go on: now, or on a later turn, in arrival order."""
        if self._waiting or self._admitted >= OPENINGS_PER_TURN:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            self._count_turns()
            await waiter  # a client that leaves meanwhile is cancelled here, its place skipped
            return
        self._admitted += 1
        self._count_turns()

    def _count_turns(self) -> None:
        if self._next_turn is None:
            self._next_turn = asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        """A new turn: the next OPENINGS_PER_TURN waiting go on (their tasks run on the turn after)."""
        self._next_turn = None
        self._admitted = 0
        while self._waiting and self._admitted < OPENINGS_PER_TURN:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._admitted += 1
        if self._waiting or self._admitted:
            self._count_turns()
