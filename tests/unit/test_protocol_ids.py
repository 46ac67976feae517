"""gateway.protocol.ids and states: UUIDv7 layout, monotonic order, the states table."""

import pytest
import os
import re
import time
import uuid

from gateway.protocol import ids, states

pytestmark = pytest.mark.unit

HEX32 = re.compile(r"[0-9a-f]{32}")


def test_uuid7_layout_version_variant_and_time():
    before_ms = time.time_ns() // 1_000_000
    value = ids.uuid7_hex()
    after_ms = time.time_ns() // 1_000_000
    assert HEX32.fullmatch(value)
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert before_ms <= int(value[:12], 16) <= after_ms + 1


def test_uuid7_strictly_increases_within_a_millisecond(monkeypatch):
    frozen_ns = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen_ns)
    values = [ids.uuid7_hex() for _ in range(20_000)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert {v[:12] for v in values} == {f"{frozen_ns // 1_000_000:012x}"}
    assert all(uuid.UUID(v).version == 7 and uuid.UUID(v).variant == uuid.RFC_4122 for v in values)


def test_uuid7_never_goes_back_when_the_clock_does(monkeypatch):
    first = ids.uuid7_hex()
    monkeypatch.setattr(time, "time_ns", lambda: 0)
    assert ids.uuid7_hex() > first


def test_prefixed_ids():
    for make, prefix in (
        (ids.new_task_id, "tsk_"),
        (ids.new_context_id, "ctx_"),
        (ids.new_message_id, "msg_"),
        (ids.new_artifact_id, "art_"),
    ):
        value = make()
        assert value.startswith(prefix) and HEX32.fullmatch(value[4:])


def test_states_table_words_and_terminal_set():
    assert [word for _state, word in states.STATES] == [
        "submitted", "working", "input-required", "completed", "failed", "canceled", "rejected",
    ]
    assert states.murmur_word(states.INPUT_REQUIRED) == "input-required"
    assert states.TERMINAL_STATES == {states.COMPLETED, states.FAILED, states.CANCELED, states.REJECTED}
    assert not states.is_terminal(states.WORKING) and states.is_terminal(states.REJECTED)


def test_state_codes_round_trip():
    codes = [states.state_code(state) for state, _word in states.STATES]
    assert codes == list(range(1, 8))
    assert all(states.state_from_code(states.state_code(s)) == s for s, _w in states.STATES)
    assert states.state_code(None) == 0 and states.state_from_code(0) is None


def test_working_messages_match_the_spec_table():
    assert states.inference_turn(2) == "inference turn 2"
    assert states.RESUMED == "resumed"
    assert states.reopened_by_hook("review-gate") == "reopened by hook review-gate"
    assert states.waiting_on_call_member(2) == "waiting on call-member: 2 call(s) outstanding"
    assert states.waiting_on_delegate_task(1) == "waiting on delegate-task: 1 delegation(s) outstanding"
    assert states.continuing_with_member_answers(3) == "continuing with 3 member answer(s)"
    assert states.continuing_with_delegation_outcomes(1) == "continuing with 1 delegation outcome(s)"
    assert states.keep_working(1, 3) == "keep working 1 of 3"
    assert states.done_check_failed(2, 3) == "done check failed, reopened 2 of 3"


def test_terminal_messages_match_the_spec_table():
    assert states.task_failed("driver_error", "simulated driver failure") == (
        "task failed (driver_error): simulated driver failure"
    )
    assert states.driver_invocation_failed("connection refused") == "driver invocation failed: connection refused"
    assert states.max_turns_exceeded(20).startswith("max_turns exceeded: ")
    assert "inference.max_turns" in states.max_turns_exceeded(20) and "20" in states.max_turns_exceeded(20)
    assert states.TASK_CANCELED_HARNESS_KILLED == (
        "task canceled; the harness was killed and its session may not resume cleanly"
    )
    assert states.REJECTED_BUSY == "task rejected: capsule is busy"
    assert states.INPUT_TIMEOUT == "input-timeout"


def forked_child_id(parent_side):
    """Fork: the child makes one id and exits; the parent runs `parent_side` meanwhile.
    (the child's id, what `parent_side` returned)"""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, ids.uuid7_hex().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    made = parent_side()
    os.waitpid(pid, 0)
    child = os.read(read_end, 64).decode()
    os.close(read_end)
    return child, made


def test_a_forked_child_does_not_repeat_the_parents_next_ids(monkeypatch):
    frozen_ns = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: frozen_ns)  # parent and child share one millisecond
    ids.uuid7_hex()
    child_id, parent_next = forked_child_id(lambda: {ids.uuid7_hex() for _ in range(1000)})
    assert HEX32.fullmatch(child_id) and child_id not in parent_next


def fresh_state(monkeypatch) -> list[int]:
    """No millisecond seen and nothing read ahead, as in a new process; the sizes of the
    system source's reads from here on."""
    monkeypatch.setattr(ids, "_last_ms", -1)
    monkeypatch.setattr(ids, "_pool", b"")
    monkeypatch.setattr(ids, "_pool_at", 0)
    reads: list[int] = []
    urandom = os.urandom
    monkeypatch.setattr(ids.os, "urandom", lambda n: reads.append(n) or urandom(n))
    return reads


def test_fresh_draws_are_distinct_leave_the_top_bit_clear_and_are_read_ahead(monkeypatch):
    reads = fresh_state(monkeypatch)
    start = time.time_ns()
    clock = iter(range(start, start + 3 * ids.POOL_DRAWS * 1_000_000, 1_000_000))  # a new millisecond each
    monkeypatch.setattr(time, "time_ns", lambda: next(clock))
    draws = [int(ids.uuid7_hex(), 16) for _ in range(3 * ids.POOL_DRAWS)]
    randoms = [(value >> 64 & 0xFFF) << 62 | value & ((1 << 62) - 1) for value in draws]
    assert len(set(randoms)) == len(randoms)
    assert all(random < 1 << (74 - 1) for random in randoms)
    assert len(reads) == 3  # each read holds POOL_DRAWS draws


def test_a_forked_child_draws_afresh_not_the_parents_next_draw(monkeypatch):
    fresh_state(monkeypatch)
    now = [time.time_ns()]
    monkeypatch.setattr(time, "time_ns", lambda: now[0])
    ids.uuid7_hex()  # the pool holds the parent's next draws
    now[0] += 1_000_000  # both draw afresh: a new millisecond
    child, parent = forked_child_id(ids.uuid7_hex)
    assert HEX32.fullmatch(child) and child[:12] == parent[:12] and child != parent
