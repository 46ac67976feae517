"""A storm's openings go on a few a turn of the loop, in arrival order (gateway/worker/pace.py)."""

from __future__ import annotations

import pytest
import asyncio

from gateway.tuning import OPENINGS_PER_TURN
from gateway.worker.pace import OpeningPace

pytestmark = pytest.mark.unit


def test_openings_at_once_go_on_at_most_per_turn_a_turn_in_arrival_order():
    async def scenario():
        loop = asyncio.get_running_loop()
        turn = [0]

        def tick() -> None:  # counts the loop's turns: one callback a turn
            turn[0] += 1
            loop.call_soon(tick)

        gate, admitted = OpeningPace(), []

        async def opening(n: int) -> None:
            await gate.admit()
            admitted.append((n, turn[0]))

        loop.call_soon(tick)
        await asyncio.gather(*(opening(n) for n in range(5 * OPENINGS_PER_TURN + 3)))
        return admitted

    admitted = asyncio.run(scenario())
    assert [n for n, _ in admitted] == list(range(5 * OPENINGS_PER_TURN + 3))
    per_turn: dict[int, int] = {}
    for _, turn in admitted:
        per_turn[turn] = per_turn.get(turn, 0) + 1
    assert max(per_turn.values()) == OPENINGS_PER_TURN and len(per_turn) >= 6


def test_a_cancelled_opening_gives_its_place_to_the_next():
    async def scenario():
        gate = OpeningPace()
        openings = [asyncio.ensure_future(gate.admit()) for _ in range(OPENINGS_PER_TURN + 2)]
        await asyncio.sleep(0)  # they ran: OPENINGS_PER_TURN went on, two wait for the next turn
        leaving, staying = openings[OPENINGS_PER_TURN:]
        assert not leaving.done() and not staying.done()
        leaving.cancel()  # its client left while it waited
        await asyncio.wait_for(staying, 5)
        return leaving.cancelled()

    assert asyncio.run(scenario())
