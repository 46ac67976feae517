"""What the sequencer stores in a ring record, so workers filter without parsing JSON.

A record's ``key`` is the task's registry key (0: an event of no task). Its ``meta`` packs
the event's task state code (low byte), the flags below and, from bit 32, its task's owner
code (`owned`: 0 for a task no token created), so a stream of one caller's own tasks
(murgw.WatchOwnTasks) filters replay and live events alike without asking anyone. Its ``data`` is the
StreamResponse ``result`` JSON, encoded once; when a plain connection must see another form
(the reopen status without its extension metadata) both forms are stored, the activated one
first, behind a 4-byte length.
"""

from __future__ import annotations

import struct

from gateway.protocol.states import INPUT_REQUIRED as INPUT_REQUIRED_STATE
from gateway.protocol.states import is_terminal, state_code, state_from_code

FRAME = 1 << 8  # a murmur frame carrier: plain task streams never see it
TERMINAL = 1 << 9  # the task's one final status: task streams end after it
INPUT_REQUIRED = 1 << 10  # a TASK_STATE_INPUT_REQUIRED status
HAS_PLAIN = 1 << 11  # data holds the activated form, then the plain form
STATUS = 1 << 12  # a statusUpdate (its state is the task's state from then on)

OWNER_SHIFT = 32  # meta's high word: the owner code the sequencer interned for the task's owner

_LEN = struct.Struct("<I")


def pack(full: bytes, plain: bytes | None = None) -> tuple[int, bytes]:
    """(extra meta flags, data) for a result with an optional plain variant."""
    if plain is None:
        return 0, full
    return HAS_PLAIN, _LEN.pack(len(full)) + full + plain


def unpack(meta: int, data: bytes) -> tuple[bytes, bytes]:
    """(activated form, plain form) of a record's result JSON."""
    if not meta & HAS_PLAIN:
        return data, data
    (size,) = _LEN.unpack_from(data)
    return data[4:4 + size], data[4 + size:]


def make_meta(state: str | None, flags: int) -> int:
    return (state_code(state) if state else 0) | flags


def status_meta(state: str) -> int:
    """The meta of a statusUpdate to `state`: the one place a state maps to record flags."""
    flags = STATUS
    if is_terminal(state):
        flags |= TERMINAL
    elif state == INPUT_REQUIRED_STATE:
        flags |= INPUT_REQUIRED
    return make_meta(state, flags)


def meta_state(meta: int) -> str | None:
    return state_from_code(meta & 0xFF)


def owned(meta: int, owner_code: int) -> int:
    """`meta` with its task's owner code."""
    return meta | owner_code << OWNER_SHIFT


def meta_owner(meta: int) -> int:
    """The owner code of a record's task (0: no token created it, or an event of no task)."""
    return meta >> OWNER_SHIFT


def owner_tag(owner_code: int) -> int:
    """An owner among the task keys (each >= 0) a pass names the events it copied by: never a
    key, so a watcher of one owner's tasks is passed over as a task stream is."""
    return -1 - owner_code
