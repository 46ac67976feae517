"""Stream openings at the pace the loop can carry: at most OPENINGS_PER_TURN a turn of the event loop.

In a reconnect storm a worker accepts up to ACCEPT_BURST connections a readable event
(http/accept.py), and their requests arrive together, so dozens of openings would run
their stream's set-up (the replay plan, the stream, its response head) in one turn of the loop:
in a 10,000-watcher storm the request path was a third of the worker's CPU (py-spy,
loadtest/RESULTS.md), two thirds of it past this point. The gate lets OPENINGS_PER_TURN through a turn;
the rest wait in arrival order, and the loop runs its timers (heartbeats, the stall pulse),
its I/O and the catch-up queue between. A storm's openings are delayed, never refused here
(the per-worker limit still answers 503 at --max-connections, before an opening comes here:
one that waits holds its place); a lone opening passes at once.

The worker's stop waits for what waits here, within its grace (`settled`, http/runs.py's
`end_apps`), and ends what is left then (`end_waiting`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from gateway.tuning import OPENINGS_PER_TURN


class Waiting(Protocol):
    """An opening that waits with no coroutine (the front's at-once path, door/admission.py)."""

    def __call__(self) -> None:
        """Its turn: it goes on."""

    def end(self) -> None:
        """The worker's stop came before its turn, and its grace is over: it never goes on."""


class OpeningPace:
    """The gate every stream opening of a worker passes: awaited (opening.py, `Openings.open`),
    or called back on the front's at-once path (`call_on_turn`), in one order."""

    def __init__(self) -> None:
        self._admitted = 0  # this turn
        self._waiting: deque[asyncio.Future | Waiting] = deque()  # awaited, or called back
        self._next_turn: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its turns run on
        self._settled: asyncio.Future | None = None  # the stop's wait for nothing waiting (`settled`)

    @property
    def open_now(self) -> bool:
        return not self._waiting and self._admitted < OPENINGS_PER_TURN

    def take(self) -> None:
        """An opening passes now (`open_now` said it may)."""
        self._admitted += 1
        self._count_turns()

    def call_on_turn(self, then: Waiting) -> None:
        """An opening with no coroutine that may not pass now (`open_now` said so): `then` is
        called on the turn it may go on (its place in the turn taken), in arrival order with
        those that `admit` awaits."""
        self._waiting.append(then)
        self._count_turns()

    async def admit(self) -> bool:
        """Return when this opening may go on: now (False), or on a later turn, in arrival
        order (True: it waited, and its client may have left meanwhile)."""
        if not self.open_now:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            self._count_turns()
            await waiter  # an ASGI server's request is cancelled here when its client leaves
            return True
        self.take()
        return False

    def settled(self) -> asyncio.Future:
        """Done once no opening waits here: none queued, and those called back have run (the
        worker's stop waits for it, within its grace)."""
        settled = self._settled
        if settled is None:
            settled = asyncio.get_running_loop().create_future()
            if self._next_turn is None:  # no turn to come: nothing waits
                settled.set_result(None)
            else:
                self._settled = settled
        return settled

    def end_waiting(self) -> None:
        """The stop's grace is over: what still waits never goes on. An awaited opening's wait
        is cancelled, as the stop cancels its task; one that waits with no coroutine is told
        (`Waiting.end`)."""
        waiting, self._waiting = self._waiting, deque()
        for waiter in waiting:
            if isinstance(waiter, asyncio.Future):
                waiter.cancel()
            else:
                waiter.end()

    def _count_turns(self) -> None:
        if self._next_turn is None:
            self._loop = asyncio.get_running_loop()
            self._next_turn = self._loop.call_soon(self._turn)

    def _turn(self) -> None:
        """A new turn: the next OPENINGS_PER_TURN waiting go on (their tasks run on the turn after)."""
        self._next_turn = None
        self._admitted = 0
        waiting = self._waiting
        loop = self._loop
        assert loop is not None  # set with the call that runs this
        while waiting and self._admitted < OPENINGS_PER_TURN:
            waiter = waiting.popleft()
            if not isinstance(waiter, asyncio.Future):
                loop.call_soon(waiter)  # on the turn after, as a task's run
            elif not waiter.done():
                waiter.set_result(None)
            else:
                continue
            self._admitted += 1
        if waiting or self._admitted:
            self._count_turns()
        elif self._settled is not None:  # none called back now (those of the turn before have run), no turn to come
            self._settled.set_result(None)
            self._settled = None
