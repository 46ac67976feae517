"""The spec's two Replay tables as one pure decision.

First table, by endpoint and `Last-Event-ID`: a task stream replays only when the header
holds a number; murmur.WatchSession replays from that number, or from 0 when the header
is absent or not a number. Second table, a replay from N over the buffer:

    buffer empty                                  -> nothing
    N >= next_id (never issued by this session)   -> gap(oldest), every buffered event
    oldest > N + 1 (events after N were evicted)  -> gap(oldest), every buffered event
    otherwise                                     -> every buffered event with id > N

Header parsing (our decision where the spec is silent, docs/architecture.md): trimmed; a
decimal integer >= 0 of any size is a number; anything else (negative, empty, "+1", "1e3",
...) is NOT_A_NUMBER.

The caller filters: a task stream writes only its own task's events, and writes the gap
only to an activated connection.
"""

from typing import NamedTuple

# A u64 sequence never issues 2**64, so any larger header value reads the same as it;
# clamping spares a huge header a big-integer parse.
_NEVER_ISSUED = 1 << 64
_MAX_DIGITS = len(str(_NEVER_ISSUED))


class _NotANumber:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_A_NUMBER"


NOT_A_NUMBER = _NotANumber()


class ReplayPlan(NamedTuple):
    gap: int | None  # firstAvailableId for a gap frame, or None
    after: int | None  # replay events with id > after; None = no replay at all


NO_REPLAY = ReplayPlan(gap=None, after=None)


def parse_last_event_id(value: str | None) -> int | None | _NotANumber:
    """None when the header is absent; its number; else NOT_A_NUMBER."""
    if value is None:
        return None
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        return NOT_A_NUMBER
    significant = digits.lstrip("0")
    if len(significant) > _MAX_DIGITS:
        return _NEVER_ISSUED
    return min(int(significant or "0"), _NEVER_ISSUED)


def plan_replay(*, watch: bool, last_event_id: int | None | _NotANumber, oldest: int, next_id: int) -> ReplayPlan:
    """`oldest` is the oldest buffered id (0 when the buffer is empty); `next_id` the next id issued."""
    if last_event_id is None or isinstance(last_event_id, _NotANumber):
        if not watch:
            return NO_REPLAY
        last_event_id = 0
    if oldest == 0:
        return NO_REPLAY
    if last_event_id >= next_id or oldest > last_event_id + 1:
        return ReplayPlan(gap=oldest, after=oldest - 1)
    return ReplayPlan(gap=None, after=last_event_id)
