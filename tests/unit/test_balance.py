"""The accept balance's rule (gateway/worker/balance.py), over every worker's places as the
shared counter blocks hold them: (open streams, places taken, --max-connections)."""

from __future__ import annotations

import pytest

from gateway.tuning import ACCEPT_BURST, BALANCE_SLACK
from gateway.worker.balance import Balance

pytestmark = pytest.mark.unit


class Places:
    """The one read the balance makes of the counter blocks."""

    def __init__(self, *places: tuple[int, int, int]):
        self.places = list(places)

    def places_by_worker(self) -> list[tuple[int, int, int]]:
        return self.places


def burst(*places: tuple[int, int, int], deferred: bool = False, connecting: int = 0) -> int:
    return Balance(Places(*places), 0).burst(deferred, connecting)  # type: ignore[arg-type]


def test_a_full_worker_takes_none_while_a_sibling_has_room_however_long_it_stepped_back():
    assert burst((3, 3, 3), (0, 0, 3)) == 0
    assert burst((3, 3, 3), (0, 0, 3), deferred=True) == 0
    assert burst((1, 2, 3), (0, 0, 3), connecting=1) == 0  # one accepted, its handshake not done


def test_when_no_sibling_has_room_a_whole_burst_is_taken_to_be_answered():
    assert burst((3, 3, 3), (3, 3, 3)) == ACCEPT_BURST  # every worker full: 503, not the queue
    assert burst((3, 3, 3), (0, 0, 0)) == ACCEPT_BURST  # the sibling not serving (its block cleared)
    assert burst((9, 9, 3)) == ACCEPT_BURST  # alone


def test_a_worker_with_room_takes_at_most_its_room():
    assert burst((0, 0, 3), (0, 0, 3)) == 3
    assert burst((0, 0, 10_000), (0, 0, 3)) == ACCEPT_BURST


def test_a_worker_ahead_of_its_share_steps_back_once():
    ahead = (BALANCE_SLACK + 1, BALANCE_SLACK + 1, 100)
    assert burst(ahead, (0, 0, 100)) == 0
    assert burst(ahead, (0, 0, 100), deferred=True) == 100 - BALANCE_SLACK - 1
    assert burst((BALANCE_SLACK, BALANCE_SLACK, 100), (0, 0, 100)) == 100 - BALANCE_SLACK


def test_a_sibling_not_serving_is_no_share_to_step_back_for():
    ahead = (BALANCE_SLACK + 1, BALANCE_SLACK + 1, 100)
    # the second sibling's block is cleared (down, or not started): only the first one's share counts
    assert burst(ahead, (BALANCE_SLACK + 1, 0, 100), (0, 0, 0)) == 100 - BALANCE_SLACK - 1
    assert burst(ahead, (0, 0, 100), (0, 0, 0)) == 0
