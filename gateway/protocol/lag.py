"""The lag rule (spec "Events a connection misses"; `lagged.missed` as we count it).

A connection reads live events from a queue of LAG_LIMIT. When it is more than LAG_LIMIT
events behind the head, it loses the oldest: its cursor jumps to LAG_LIMIT behind the
head, and `missed` counts the ring events skipped, other tasks' included (the ring is one
sequence, and a task stream's lost event may be anyone's). An activated connection is
written one `lagged` frame naming `missed` before the next event it receives.
"""

LAG_LIMIT = 128


def skip_lag(cursor: int, head: int, limit: int = LAG_LIMIT) -> tuple[int, int]:
    """`cursor` is the id of the last event consumed, `head` the newest id. Returns (cursor, missed)."""
    behind = head - cursor
    if behind <= limit:
        return cursor, 0
    new_cursor = head - limit
    return new_cursor, new_cursor - cursor
