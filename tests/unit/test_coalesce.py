"""The adaptive coalescing policy, as the pure function it is (no server, no timing)."""

import pytest
import math

from hypothesis import given, strategies as st

from gateway.worker.delivery.coalesce import KNOBS, Knobs, load_share, next_delay

pytestmark = pytest.mark.unit

seconds = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
delays = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)
counts = st.integers(min_value=0, max_value=10_000)


@given(seconds, seconds, delays, counts)
def test_the_delay_is_bounded(pass_s, interval_s, current, events):
    assert 0.0 <= next_delay(pass_s, interval_s, current, events) <= KNOBS.max_delay


@given(seconds, seconds, seconds, delays, counts)
def test_a_longer_pass_never_shortens_the_delay(pass_a, pass_b, interval_s, current, events):
    low, high = sorted((pass_a, pass_b))
    assert next_delay(low, interval_s, current, events) <= next_delay(high, interval_s, current, events)


@given(seconds, seconds, seconds, delays, counts)
def test_a_longer_interval_never_lengthens_the_delay(pass_s, interval_a, interval_b, current, events):
    short, long = sorted((interval_a, interval_b))
    assert next_delay(pass_s, long, current, events) <= next_delay(pass_s, short, current, events)


@given(seconds, seconds, delays, counts, counts)
def test_more_events_never_shorten_the_delay(pass_s, interval_s, current, events_a, events_b):
    few, many = sorted((events_a, events_b))
    assert next_delay(pass_s, interval_s, current, few) <= next_delay(pass_s, interval_s, current, many)


def test_events_too_seldom_for_the_cap_never_wait():
    """10,000 watchers of 10 events a second: every pass busy (40 ms of each 100), yet no wait
    up to the cap puts two events in a write, so none is added, and one in force decays."""
    assert next_delay(0.040, 0.100, 0.0, 1) == 0.0
    assert next_delay(0.040, 0.100, KNOBS.max_delay, 1) == KNOBS.max_delay * KNOBS.decay
    assert next_delay(0.040, 0.100, 0.0, 10) == KNOBS.step  # ten in the same interval: worth it


@given(st.floats(min_value=0.0, max_value=KNOBS.idle_share), st.floats(min_value=0.0, max_value=KNOBS.max_delay))
def test_light_load_returns_to_zero(share, start):
    delay, steps = start, 0
    bound = math.ceil(math.log(KNOBS.floor / KNOBS.max_delay, KNOBS.decay)) + 1
    while delay and steps <= bound:
        delay = next_delay(share * 0.01, 0.01, delay, 1)
        steps += 1
    assert delay == 0.0


def test_light_load_from_zero_stays_at_zero():
    """A few streams: a pass of 50 µs every 10 ms, and an idle poll, never wait."""
    assert next_delay(50e-6, 0.010, 0.0, 1) == 0.0
    assert next_delay(0.0, 0.050, 0.0, 0) == 0.0


def test_a_saturated_loop_reaches_the_cap_and_holds_it():
    delay = 0.0
    for _ in range(math.ceil(KNOBS.max_delay / KNOBS.step) + 1):
        delay = next_delay(0.009, 0.010 + delay, delay, 1 + round(delay / 0.010))
    assert delay == KNOBS.max_delay
    assert next_delay(0.030, 0.030, delay, 3) == KNOBS.max_delay


@given(st.floats(min_value=KNOBS.idle_share, max_value=KNOBS.busy_share, exclude_min=True, exclude_max=True),
       st.floats(min_value=0.0, max_value=KNOBS.max_delay))
def test_between_the_shares_the_delay_holds(share, current):
    assert next_delay(share, 1.0, current, 100) == current


def test_the_share_of_the_loop():
    assert load_share(0.0, 0.0) == 0.0
    assert load_share(0.002, 0.010) == 0.2
    assert load_share(0.010, 0.002) == 1.0  # a pass longer than the gap: all of the loop


def test_knobs_can_be_given():
    eager = Knobs(busy_share=0.05, step=0.004, max_delay=0.004)
    assert next_delay(0.001, 0.010, 0.0, 3, eager) == 0.004
