"""Session-unique ids: a prefix and a UUIDv7 as 32 lower-case hex digits.

Layout (RFC 9562): 48-bit unix milliseconds, version 7, 12 bits rand_a, variant 0b10,
62 bits rand_b. The 74 random bits double as a counter: a new millisecond draws them
fresh, and an id made in the same millisecond as (or, after a clock step back, earlier
than) the previous one takes the previous id plus one. So within a process successive ids
strictly increase, as integers and as fixed-width hex strings, which is what lets events
and messages be ordered by id. The gateway's processes are spawned (each a fresh
interpreter, so each draws afresh); a forked child, should a user of this module fork, is
made to draw afresh too (`register_at_fork`): continuing the parent's counter would repeat
the parent's next ids.

Fresh draws come from the system's source (`os.urandom`, as `secrets`) read POOL_DRAWS at a
time: in a storm nearly every opening's acknowledgement begins a millisecond, and a getrandom
call each was 1.4% of a worker's CPU (py-spy, loadtest/RESULTS.md run 16).
"""

import os
import threading
import time

_RANDOM_BITS = 74
_RANDOM_LIMIT = 1 << _RANDOM_BITS
# A fresh draw leaves the top random bit clear, so a burst in one millisecond has
# 2**73 increments before it must borrow the next millisecond.
_FRESH_BITS = _RANDOM_BITS - 1
_DRAW_BYTES = 10  # a draw's bytes, of which the top _FRESH_BITS bits are kept
POOL_DRAWS = 64  # draws read from the system's source at once

_lock = threading.Lock()
_last_ms = -1
_last_random = 0
_pool = b""  # draws read ahead, from `_pool_at` on
_pool_at = 0


def _fresh() -> int:
    """`_FRESH_BITS` random bits (the caller holds `_lock`)."""
    global _pool, _pool_at
    if _pool_at == len(_pool):
        _pool, _pool_at = os.urandom(_DRAW_BYTES * POOL_DRAWS), 0
    draw = int.from_bytes(_pool[_pool_at:_pool_at + _DRAW_BYTES], "big")
    _pool_at += _DRAW_BYTES
    return draw >> (8 * _DRAW_BYTES - _FRESH_BITS)


def _next_fields() -> tuple[int, int]:
    global _last_ms, _last_random
    now_ms = time.time_ns() // 1_000_000
    with _lock:
        if now_ms > _last_ms:
            _last_ms, _last_random = now_ms, _fresh()
        else:
            _last_random += 1
            if _last_random == _RANDOM_LIMIT:
                _last_ms, _last_random = _last_ms + 1, 0
        return _last_ms, _last_random


def _forget_parent_counter() -> None:
    global _lock, _last_ms, _pool, _pool_at
    _lock = threading.Lock()
    _last_ms = -1
    _pool, _pool_at = b"", 0  # the parent's next draws


os.register_at_fork(after_in_child=_forget_parent_counter)


def uuid7_hex() -> str:
    unix_ms, random = _next_fields()
    rand_a = random >> 62
    rand_b = random & ((1 << 62) - 1)
    value = (unix_ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return f"{value:032x}"


def new_task_id() -> str:
    return "tsk_" + uuid7_hex()


def new_context_id() -> str:
    return "ctx_" + uuid7_hex()


def new_message_id() -> str:
    return "msg_" + uuid7_hex()


def new_artifact_id() -> str:
    return "art_" + uuid7_hex()
