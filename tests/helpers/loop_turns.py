"""Waiting in-process for a condition by the event loop's turns, never by the clock."""

from __future__ import annotations

import asyncio
from typing import Callable


async def until(predicate: Callable[[], object], turns: int = 10_000) -> None:
    """Until `predicate()` holds, yielding one loop turn at a time; fails after `turns`."""
    for _ in range(turns):  # bounded: loop turns, not seconds
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")
