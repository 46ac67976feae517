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
from typing import Callable

from gateway.tuning import OPENINGS_PER_TURN


class OpeningPace:
    """The gate every stream opening of a worker passes: awaited (opening.py, `Openings.open`),
    or with a callback on the front's at-once path (`take_or_call`), in one order."""

    def __init__(self) -> None:
        self._admitted = 0  # this turn
        self._waiting: deque[asyncio.Future | Callable[[], None]] = deque()  # awaited, or called back
        self._next_turn: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its turns run on

    def take_or_call(self, then: Callable[[], None]) -> bool:
        """An opening with no coroutine (the front's at-once path, admission.py): True when
        it passes now; else False, and `then` is called on the turn it may go on (its place
        taken), in arrival order with those that `admit` awaits."""
        if self.open_now:
            self.take()
            return True
        self._waiting.append(then)
        self._count_turns()
        return False

    @property
    def open_now(self) -> bool:
        return not self._waiting and self._admitted < OPENINGS_PER_TURN

    def take(self) -> None:
        self._admitted += 1
        self._count_turns()

    async def admit(self) -> None:
        """Return when this opening may go on: now, or on a later turn, in arrival order."""
        if not self.open_now:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            self._count_turns()
            await waiter  # a client that leaves meanwhile is cancelled here, its place skipped
            return
        self.take()

    def _count_turns(self) -> None:
        if self._next_turn is None:
            self._loop = asyncio.get_running_loop()
            self._next_turn = self._loop.call_soon(self._turn)

    def _turn(self) -> None:
        """A new turn: the next OPENINGS_PER_TURN waiting go on (their tasks run on the turn after)."""
        self._next_turn = None
        self._admitted = 0
        loop = self._loop
        assert loop is not None  # set with the call that runs this
        while self._waiting and self._admitted < OPENINGS_PER_TURN:
            waiter = self._waiting.popleft()
            if not isinstance(waiter, asyncio.Future):
                loop.call_soon(waiter)  # on the turn after, as a task's run
            elif not waiter.done():
                waiter.set_result(None)
            else:
                continue
            self._admitted += 1
        if self._waiting or self._admitted:
            self._count_turns()
