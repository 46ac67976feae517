"""The lag rule (spec "Events a connection misses", "Replay"; `lagged.missed` as we count it).

The spec: "Each connection reads live events from a queue of 128. A connection that falls
more than 128 events behind loses the oldest of them; an activated connection is written a
lagged frame naming how many before the next event it receives. The connection stays open."
And: "Live events follow the replay on the same connection, starting after the highest id
the replay held." So a replay is the buffer as it was when the request was read, written
whole whatever the ring does next; only live events (those after the replay's highest id)
ever count toward the 128, and only the oldest of them are lost. The worker keeps the
replay's entries for as long as the stream owes them (gateway/worker/delivery/window.py,
`Replay`; what replays the ring has lapped keep alive is bounded per worker, delivery/lapped.py);
this module is the rule for live events.

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
