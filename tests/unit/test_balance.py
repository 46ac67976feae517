"""The accept balance's rule (gateway/worker/balance.py), over every worker's places as the
shared counter blocks hold them, (open streams, places taken, --max-connections), and their
beat words on a board, read on a clock the test moves."""

from __future__ import annotations

import pytest

from gateway.common import board
from gateway.tuning import ACCEPT_BURST, BALANCE_SLACK, SIBLING_SILENT_SECONDS
from gateway.worker.balance import Balance
from helpers.gateway_harness import Tally

pytestmark = pytest.mark.unit


class Places(Tally):
    """The one read the balance makes of the counter blocks (and the adds it makes to its own)."""

    def __init__(self, *places: tuple[int, int, int]):
        super().__init__()
        self.places = list(places)

    def places_by_worker(self) -> list[tuple[int, int, int]]:
        return self.places


class Worker0:
    """Worker 0's balance among `places`, its siblings' beat words on a board, and its clock."""

    def __init__(self, *places: tuple[int, int, int]):
        self.places, self.words, self.now = Places(*places), [0] * board.CONTROL_WORDS, 0.0
        self.balance = Balance(self.places, board.Board(self.words), 0, lambda: self.now)  # type: ignore[arg-type]

    def burst(self, deferred: bool = False) -> int:
        return self.balance.burst(deferred)

    def beat(self, worker: int) -> None:
        self.words[board.LOOP_BEAT + worker] += 1


def burst(*places: tuple[int, int, int], deferred: bool = False) -> int:
    return Worker0(*places).burst(deferred)


def test_a_full_worker_takes_none_while_a_sibling_has_room_however_long_it_stepped_back():
    assert burst((3, 3, 3), (0, 0, 3)) == 0
    assert burst((3, 3, 3), (0, 0, 3), deferred=True) == 0
    assert burst((1, 3, 3), (0, 0, 3)) == 0  # one accepted, its handshake not done: a place taken


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


def test_a_full_worker_waits_for_a_silent_siblings_room_only_until_the_bound():
    worker = Worker0((3, 3, 3), (0, 0, 3))
    assert worker.burst() == 0  # the first look: its count starts now
    worker.now = SIBLING_SILENT_SECONDS - 0.01
    assert worker.burst(deferred=True) == 0
    worker.now = SIBLING_SILENT_SECONDS
    assert worker.burst(deferred=True) == ACCEPT_BURST  # stopped or stuck: accepted, answered 503
    worker.now += 60.0
    assert worker.burst() == ACCEPT_BURST  # still silent


def test_a_sibling_whose_beat_moves_is_waited_for_again_from_its_last_move_seen():
    worker = Worker0((3, 3, 3), (0, 0, 3))
    worker.burst()
    worker.now = 10.0
    assert worker.burst() == ACCEPT_BURST
    worker.beat(1)  # resumed (SIGCONT), or replaced and serving
    assert worker.burst() == 0
    worker.now = 11.0
    worker.beat(1)  # it keeps turning
    assert worker.burst() == 0
    worker.now = 11.0 + SIBLING_SILENT_SECONDS - 0.01  # silent since 11.0 only
    assert worker.burst() == 0
    worker.now = 11.0 + SIBLING_SILENT_SECONDS
    assert worker.burst() == ACCEPT_BURST


def test_one_live_sibling_with_room_is_enough_to_wait_for():
    worker = Worker0((3, 3, 3), (0, 0, 3), (0, 0, 3), (3, 3, 3))
    worker.burst()
    worker.now = SIBLING_SILENT_SECONDS
    worker.beat(2)
    worker.beat(3)  # turning, but full: no room to wait for
    assert worker.burst() == 0  # worker 1 silent, worker 2 turning
    worker.now = 2 * SIBLING_SILENT_SECONDS
    assert worker.burst() == ACCEPT_BURST  # both silent now


def test_a_silent_sibling_is_no_share_to_step_back_for():
    ahead = (BALANCE_SLACK + 1, BALANCE_SLACK + 1, 100)
    worker = Worker0(ahead, (0, 0, 100))
    assert worker.burst() == 0  # it turns (so far as this worker has seen): step back once
    worker.now = SIBLING_SILENT_SECONDS
    assert worker.burst() == 100 - BALANCE_SLACK - 1


def test_a_worker_with_room_reads_no_beat_word_while_no_one_is_behind_it():
    worker = Worker0((0, 0, 3), (0, 0, 3))
    assert worker.burst() == 3 and worker.balance.seen == {}  # no sibling looked at


def test_an_accepted_connection_takes_a_place_its_siblings_see_until_it_is_dropped():
    worker = Worker0((0, 0, 3))
    worker.balance.accepted()  # then the front's, counted on (or gone before any front was made:)
    assert worker.places.counts == {("connections_idle", ""): 1}
    worker.balance.dropped()
    assert worker.places.counts == {("connections_idle", ""): 0}
