"""The sequencer's counts behind the limits (gateway/sequencer/client_ledger.py): all-or-nothing places,
release only of what a connection holds, everything a closed connection held released, and a
bounded bucket table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sequencer.client_ledger import Holdings, RateBuckets, StreamLedger

pytestmark = pytest.mark.unit


def test_places_are_all_or_nothing():
    ledger, held = StreamLedger(), Holdings()
    assert ledger.acquire(held, [("client a", 2), ("token t", 1)]) is None
    assert ledger.acquire(held, [("client a", 2), ("token t", 1)]) == 1  # the token's limit
    assert ledger.open == {"client a": 1, "token t": 1}  # nothing taken by the refusal
    assert ledger.acquire(held, [("client a", 2)]) is None
    assert ledger.acquire(held, [("client a", 2)]) == 0


def test_release_only_what_the_connection_holds():
    ledger, mine, theirs = StreamLedger(), Holdings(), Holdings()
    ledger.acquire(mine, [("client a", 5)])
    ledger.release(theirs, ["client a"])  # not theirs: ignored
    assert ledger.open["client a"] == 1
    ledger.release(mine, ["client a"])
    ledger.release(mine, ["client a"])  # twice: no underflow
    assert ledger.open == {} and mine == {}


def test_a_closed_connection_releases_everything():
    ledger, dead, alive = StreamLedger(), Holdings(), Holdings()
    for _ in range(3):
        ledger.acquire(dead, [("client a", 5), ("token t", 5)])
    ledger.acquire(alive, [("client a", 5)])
    ledger.release_all(dead)
    assert ledger.open == {"client a": 1}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=60))
def test_counts_equal_what_is_held(steps):
    ledger, conns = StreamLedger(), [Holdings() for _ in range(3)]
    for conn, take in steps:
        if take:
            ledger.acquire(conns[conn], [("client a", 4)])
        else:
            ledger.release(conns[conn], ["client a"])
        assert ledger.open["client a"] == sum(h["client a"] for h in conns) <= 4
    for held in conns:
        ledger.release_all(held)
    assert ledger.open == {}


def test_bucket_grants_its_burst_then_says_when():
    buckets = RateBuckets()
    assert [buckets.take("a", 0.5, 3, 0.0) for _ in range(3)] == [0, 0, 0]
    assert buckets.take("a", 0.5, 3, 0.0) == 2  # 1 / 0.5 s
    assert buckets.take("b", 0.5, 3, 0.0) == 0  # another client's own bucket
    assert buckets.take("a", 0.5, 3, 2.0) == 0  # refilled one


def test_bucket_holds_at_least_one():
    assert RateBuckets().take("a", 0.1, 0.2, 0.0) == 0


def test_bucket_table_is_bounded_and_forgets_refilled():
    """[claim: client-rate]"""
    buckets = RateBuckets(capacity=100)
    for i in range(1000):
        buckets.take(f"c{i}", 1.0, 5, 0.0)
    assert len(buckets.buckets) == 100
    buckets.take("late", 1.0, 5, 10.0)  # every other bucket has refilled by now
    assert list(buckets.buckets) == ["late"]
