"""What the upstream's replay, at a reconnect, says about its session.

The protocol carries no session identity, so the link tells a restarted upstream from the
same one by what the replay writes (https://docs.murmur.nexus/reference/streaming-protocol/,
Replay). The link resumes from one id *before* its last (`after`), so a session that issued
our last id always replays something first: that event again (the very bytes we hold), or a
`gap` naming an oldest id above ours when it was evicted. So, before anything else:

- a `gap` whose firstAvailableId is at or below `after`: the spec writes one only when
  `after` was never issued by this session (its head is below ours): a new session;
- our last id with other bytes: a new session that has written as far as our last id;
- our last id with the same bytes: the same session; the event is skipped (it is in the ring);
- a heartbeat, which the upstream writes only after the replay, with nothing before it:
  the replay was empty, which a session that issued our last id never writes: a new session.

Any later id at or below the last one is the caller's rule (a replay never repeats an id).
A first connection (last id 0) resumes from 0 and has nothing to compare.
"""

from __future__ import annotations

SKIP, RESTARTED = "skip", "restarted"


class Resume:
    """One reconnect's check; `after` is the Last-Event-ID it sends."""

    def __init__(self, last_id: int, last_event: bytes | None):
        self.last_id, self.last_event = last_id, last_event
        self.after = max(last_id - 1, 0)
        self.judged = last_id == 0

    def gap(self, first_available: object) -> str | None:
        first, self.judged = not self.judged, True
        if first and isinstance(first_available, int) and first_available <= self.after:
            return RESTARTED
        return None

    def event(self, event_id: int, event: bytes) -> str | None:
        first, self.judged = not self.judged, True
        if first and event_id == self.last_id:
            return SKIP if event == self.last_event else RESTARTED
        return None

    def heartbeat(self) -> str | None:
        first, self.judged = not self.judged, True
        return RESTARTED if first else None
