"""Every connection's header timeout in one worker, on one timer.

A connection gets --header-timeout for each whole request head it sends: its first, and each
after an answer on a kept connection (front.py closes it when the time is up). A timer of its
own for each connection (`loop.call_later`, cancelled when the head came, a millisecond later
for a watcher) made and freed a libuv timer for every opening, and held one for every
connection that sends nothing. The timeout is the same for every connection, so the deadlines
come in the order they are set: they wait in a dict (it keeps that order; a connection leaves
it in O(1) when its head comes, so it holds only the connections waiting for one), and one
timer fires just after the earliest, closes every connection whose time is up and is set again
for the next. It fires GRAIN_SECONDS after a deadline, so the closes that fall within one grain
share a wake-up: connections that arrive and send nothing (a slowloris) wake it at most 1 /
GRAIN_SECONDS times a second, each reading the dict from its start.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

GRAIN_SECONDS = 0.01  # how late after its deadline a connection may close (libuv counts whole milliseconds)


class Waiting(Protocol):
    def timed_out(self) -> None: ...


class HeadDeadlines:
    """The connections waiting for a head (`arm`ed, not yet `disarm`ed), each with its deadline."""

    __slots__ = ("_loop", "_timeout", "_waiting", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float):
        self._loop, self._timeout = loop, timeout
        self._waiting: dict[Waiting, float] = {}  # in the order of their deadlines
        self._timer: asyncio.TimerHandle | None = None  # at the earliest deadline when set; None: none waited

    def arm(self, connection: Waiting) -> None:
        """`connection` waits for a head from now: `timed_out` is called when its time is up."""
        waiting = self._waiting
        waiting.pop(connection, None)  # set again: to the end, where its new deadline belongs
        waiting[connection] = self._loop.time() + self._timeout
        if self._timer is None:
            self._timer = self._loop.call_later(self._timeout + GRAIN_SECONDS, self._expire)

    def disarm(self, connection: Waiting) -> None:
        """`connection` no longer waits (its head came, or it closed)."""
        self._waiting.pop(connection, None)

    def _expire(self) -> None:
        waiting, now = self._waiting, self._loop.time()
        due = []
        for connection, deadline in waiting.items():
            if deadline > now:
                break
            due.append(connection)
        for connection in due:
            del waiting[connection]
        self._timer = None
        if waiting:
            earliest = next(iter(waiting.values()))
            self._timer = self._loop.call_later(earliest - now + GRAIN_SECONDS, self._expire)
        for connection in due:
            try:
                connection.timed_out()
            except Exception as exc:  # as the loop reports a timer's callback that raised: the others still run
                self._loop.call_exception_handler({"message": "closing a connection at its header timeout failed",
                                                   "exception": exc})
