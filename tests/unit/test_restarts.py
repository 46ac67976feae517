"""The restart policy (gateway/supervisor/restarts.py) as data: the waits it gives for a slot's deaths."""

from __future__ import annotations

import pytest

from gateway.supervisor.restarts import Backoff
from gateway.tuning import QUICK_DEATH_SECONDS, RESTART_FIRST_DELAY, RESTART_MAX_DELAY, SERVED_SECONDS

pytestmark = pytest.mark.unit


def lives(backoff: Backoff, spans: list[float]) -> list[float]:
    """The waits for a child that lives each span in turn, restarted when its wait is over."""
    now, waits = 0.0, []
    backoff.started_at(now)
    for span in spans:
        now += span
        waits.append(backoff.died_at(now))
        assert backoff.due == now + waits[-1] and not backoff.is_due(now + waits[-1] - 1e-6)
        assert backoff.is_due(now + waits[-1])
        now = backoff.due
        backoff.started_at(now)
        assert backoff.due is None
    return waits


def test_quick_deaths_wait_twice_as_long_each_time_up_to_the_cap():
    waits = lives(Backoff(), [0.1] * 10)
    assert waits == [RESTART_FIRST_DELAY * 2 ** k for k in range(7)] + [RESTART_MAX_DELAY] * 3


def test_a_death_after_a_while_restarts_at_once_and_keeps_the_count():
    assert lives(Backoff(), [0.1, 0.1, QUICK_DEATH_SECONDS + 1, 0.1]) == [0.25, 0.5, 0.0, 1.0]


def test_a_child_that_served_a_minute_clears_the_count():
    assert lives(Backoff(), [0.1, 0.1, SERVED_SECONDS, 0.1]) == [0.25, 0.5, 0.0, 0.25]
