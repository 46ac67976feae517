"""gateway.protocol.replay and lag: the Replay tables against a brute-force model, and the lag rule."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.lag import LAG_LIMIT, skip_lag
from gateway.protocol.replay import NOT_A_NUMBER, ReplayPlan, parse_last_event_id, plan_replay

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value, parsed",
    [
        (None, None),
        ("0", 0),
        ("42", 42),
        (" 42\t", 42),
        ("007", 7),
        ("18446744073709551615", 2**64 - 1),
        ("-1", NOT_A_NUMBER),
        ("", NOT_A_NUMBER),
        (" ", NOT_A_NUMBER),
        ("+1", NOT_A_NUMBER),
        ("1e3", NOT_A_NUMBER),
        ("1.0", NOT_A_NUMBER),
        ("0x10", NOT_A_NUMBER),
        ("1 2", NOT_A_NUMBER),
        ("٣", NOT_A_NUMBER),  # a non-ASCII digit
        ("abc", NOT_A_NUMBER),
    ],
)
def test_parse_last_event_id(value, parsed):
    result = parse_last_event_id(value)
    assert result is NOT_A_NUMBER if parsed is NOT_A_NUMBER else result == parsed


def test_huge_last_event_id_is_a_number_never_issued():
    huge = parse_last_event_id("9" * 10_000)
    assert isinstance(huge, int) and huge >= 2**64
    assert parse_last_event_id("0" * 10_000 + "5") == 5
    assert plan_replay(watch=True, last_event_id=huge, oldest=3, next_id=10) == ReplayPlan(gap=3, after=2)


def model_replay(watch, header, buffer_ids, next_id):
    """The spec's tables, read literally over a simulated buffer: (gap or None, ids written)."""
    if header is None or header is NOT_A_NUMBER:
        if not watch:
            return None, []
        header = 0
    if not buffer_ids:
        return None, []
    if header >= next_id or buffer_ids[0] > header + 1:
        return buffer_ids[0], list(buffer_ids)
    return None, [i for i in buffer_ids if i > header]


def execute(plan, buffer_ids):
    if plan.after is None:
        return plan.gap, []
    return plan.gap, [i for i in buffer_ids if i > plan.after]


@given(
    watch=st.booleans(),
    session=st.tuples(st.integers(0, 2000), st.integers(0, 512)),  # (events evicted, events buffered)
    header=st.one_of(st.none(), st.just(NOT_A_NUMBER), st.integers(0, 3000)),
)
def test_plan_replay_matches_the_spec_tables(watch, session, header):
    evicted, buffered = session
    buffer_ids = list(range(evicted + 1, evicted + buffered + 1))
    next_id = evicted + buffered + 1
    oldest = buffer_ids[0] if buffer_ids else 0
    plan = plan_replay(watch=watch, last_event_id=header, oldest=oldest, next_id=next_id)
    assert execute(plan, buffer_ids) == model_replay(watch, header, buffer_ids, next_id)
    if header is not None and header is not NOT_A_NUMBER and plan.gap is None and buffer_ids:
        # Without a gap, the replay is exactly the events written after the header's id.
        assert execute(plan, buffer_ids)[1] == list(range(header + 1, next_id))


def test_replay_table_rows():
    assert plan_replay(watch=False, last_event_id=None, oldest=1, next_id=5) == ReplayPlan(None, None)
    assert plan_replay(watch=False, last_event_id=NOT_A_NUMBER, oldest=1, next_id=5) == ReplayPlan(None, None)
    assert plan_replay(watch=True, last_event_id=None, oldest=1, next_id=5) == ReplayPlan(None, 0)
    assert plan_replay(watch=True, last_event_id=NOT_A_NUMBER, oldest=3, next_id=5) == ReplayPlan(3, 2)
    assert plan_replay(watch=True, last_event_id=7, oldest=0, next_id=1) == ReplayPlan(None, None)
    assert plan_replay(watch=False, last_event_id=9, oldest=2, next_id=9) == ReplayPlan(2, 1)
    assert plan_replay(watch=False, last_event_id=3, oldest=2, next_id=9) == ReplayPlan(None, 3)
    assert plan_replay(watch=False, last_event_id=1, oldest=2, next_id=9) == ReplayPlan(None, 1)
    assert plan_replay(watch=False, last_event_id=0, oldest=2, next_id=9) == ReplayPlan(2, 1)
    assert plan_replay(watch=False, last_event_id=8, oldest=2, next_id=9) == ReplayPlan(None, 8)


@given(cursor=st.integers(0, 10_000), ahead=st.integers(0, 2_000), limit=st.integers(1, 512))
def test_skip_lag_keeps_at_most_limit_behind_and_counts_what_it_skips(cursor, ahead, limit):
    head = cursor + ahead
    new_cursor, missed = skip_lag(cursor, head, limit)
    assert head - new_cursor <= limit
    assert missed + (head - new_cursor) == head - cursor
    assert missed == 0 if ahead <= limit else (missed >= 1 and head - new_cursor == limit)


def test_skip_lag_at_the_spec_limit():
    assert LAG_LIMIT == 128
    assert skip_lag(10, 138) == (10, 0)
    assert skip_lag(10, 178) == (50, 40)
