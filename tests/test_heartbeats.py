"""The heartbeat schedule's firing gives the loop back after its budget (gateway/worker/heartbeats.py)."""

from __future__ import annotations

import asyncio
import time

from gateway.worker.catchup import TURN_BUDGET_SECONDS
from gateway.worker.heartbeats import Heartbeats


def test_streams_due_at_once_are_written_over_several_turns_each_within_the_budget():
    async def scenario():
        loop = asyncio.get_running_loop()
        written: list[tuple[str, int]] = []
        turn = [0]

        def tick() -> None:  # counts the loop's turns: one callback a turn
            turn[0] += 1
            loop.call_soon(tick)

        def on_due(stream: str, due: float) -> bool:
            written.append((stream, turn[0]))
            until = time.thread_time() + 2 * TURN_BUDGET_SECONDS  # each write outlasts the budget
            while time.thread_time() < until:
                pass
            return False  # closed meanwhile: not scheduled again

        beats = Heartbeats(0.001, on_due)
        streams = [f"s{i}" for i in range(5)]
        for stream in streams:
            beats.add(stream)
        time.sleep(0.01)  # the loop stands still: all five are due at its next turn
        loop.call_soon(tick)
        deadline = loop.time() + 10
        while len(written) < len(streams) and loop.time() < deadline:
            await asyncio.sleep(0.001)
        beats.stop()
        return written

    written = asyncio.run(scenario())
    assert [stream for stream, _ in written] == [f"s{i}" for i in range(5)]  # in due order, each once
    turns = [t for _, t in written]
    assert len(set(turns)) == len(turns)  # one firing each: the loop turned between them
