"""A storm's openings go on a few a turn of the loop, in arrival order (gateway/worker/pace.py)."""

from __future__ import annotations

import asyncio
import collections

import pytest

from gateway.tuning import OPENINGS_PER_TURN
from gateway.worker.pace import OpeningPace

pytestmark = pytest.mark.unit


class CalledBack:
    """An opening that waits with no coroutine (`pace.Waiting`): its turn, or its end at the stop."""

    def __init__(self, turn, end=lambda: None):
        self.turn, self.end = turn, end

    def __call__(self) -> None:
        self.turn()


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


def test_called_back_and_awaited_openings_share_one_order_and_one_bound():
    """The front's at-once path (`call_on_turn`) and the awaited path (`admit`) wait in one
    line: arrival order across both, at most OPENINGS_PER_TURN a turn, a callback's place
    taken when it is called."""
    async def scenario():
        loop = asyncio.get_running_loop()
        turn = [0]

        def tick() -> None:
            turn[0] += 1
            loop.call_soon(tick)

        gate, went, done = OpeningPace(), [], loop.create_future()
        total = 3 * OPENINGS_PER_TURN + 5

        def went_on(n: int) -> None:
            went.append((n, turn[0]))
            if len(went) == total:
                done.set_result(None)

        async def awaited(n: int) -> None:
            await gate.admit()
            went_on(n)

        loop.call_soon(tick)
        tasks = []
        for n in range(total):
            if n % 2:
                tasks.append(loop.create_task(awaited(n)))
                await asyncio.sleep(0)  # it asks for its place now, before the next arrives
            elif gate.open_now:
                gate.take()
                went_on(n)
            else:
                gate.call_on_turn(CalledBack(lambda n=n: went_on(n)))
        await asyncio.wait_for(done, 5)
        await asyncio.gather(*tasks)
        return went

    went = asyncio.run(scenario())
    assert [n for n, _ in went] == list(range(3 * OPENINGS_PER_TURN + 5))
    assert max(collections.Counter(turn for _, turn in went).values()) <= OPENINGS_PER_TURN


def test_the_stop_waits_until_no_opening_waits_and_ends_those_still_waiting_at_its_grace():
    """`settled` is done once nothing waits (those called back have run: a stop's grace), at
    once when nothing ever did; `end_waiting` ends every callback still queued, in order, and
    none of them goes on afterwards (awaited ones are their tasks' to cancel)."""
    async def scenario():
        gate, went, ended = OpeningPace(), [], []
        assert gate.settled().done()  # nothing waits
        for _ in range(OPENINGS_PER_TURN):
            assert gate.open_now
            gate.take()
        for n in range(2 * OPENINGS_PER_TURN + 3):
            gate.call_on_turn(CalledBack(lambda n=n: went.append(n), lambda n=n: ended.append(n)))
        settled = gate.settled()
        assert not settled.done()
        await asyncio.wait_for(settled, 5)
        assert went == list(range(2 * OPENINGS_PER_TURN + 3)) and not ended  # all ran, before it was done

        went.clear()
        for n in range(OPENINGS_PER_TURN + 5):  # in one turn: 5 wait for the next
            if gate.open_now:
                gate.take()
            else:
                gate.call_on_turn(CalledBack(lambda n=n: went.append(n), lambda n=n: ended.append(n)))
        assert not gate.settled().done()
        gate.end_waiting()  # the grace is over before their turn
        for _ in range(5):
            await asyncio.sleep(0)
        return went, ended, gate.settled().done()

    went, ended, settled = asyncio.run(scenario())
    assert not went and ended == list(range(OPENINGS_PER_TURN, OPENINGS_PER_TURN + 5)) and settled


def test_the_stop_need_not_wait_when_the_last_waiting_opening_was_cancelled():
    """A turn that finds only cancelled waits calls nothing back and schedules no turn after it:
    the stop's wait (`settled`) is over then, not at the end of its grace."""
    async def scenario():
        gate = OpeningPace()
        for _ in range(OPENINGS_PER_TURN):
            gate.take()  # this turn's places, all taken
        opening = gate.admit()
        waiter = opening.send(None)  # it waits for a later turn: the wait it yields
        settled = gate.settled()  # the stop looks while a turn is to come
        waiter.cancel()  # its task cancelled before that turn (its client left, or the stop)
        opening.close()
        done, _ = await asyncio.wait([settled], timeout=3)
        assert settled in done
        assert gate.settled().done()  # and a later look is not left with a stale wait
    asyncio.run(scenario())
