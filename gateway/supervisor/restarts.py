"""When the supervisor restarts a child that died: at once, or after a growing wait.

A child that dies within QUICK_DEATH_SECONDS of its start (a certificate or /dev/shm found
bad only in the child, a crash at import; counted from the spawn, so the interpreter's start
and the imports, a second or more on a small box, are inside it) would die again at once:
restarted every watch turn, it spins the supervisor and floods the log. So a quick death waits
before its restart, the wait doubling from RESTART_FIRST_DELAY up to RESTART_MAX_DELAY with
each further quick death (gateway/tuning.py); a child that has served SERVED_SECONDS clears
the count, and any other death is restarted at once (the slot's
watchers reconnect to the other workers meanwhile). The policy is data, one per slot, with no
clock of its own: the supervisor hands it the times.
"""

from __future__ import annotations

from gateway.tuning import QUICK_DEATH_SECONDS, RESTART_FIRST_DELAY, RESTART_MAX_DELAY, SERVED_SECONDS


class Backoff:
    """One child slot's restart policy."""

    __slots__ = ("delay", "started", "due")

    def __init__(self) -> None:
        self.delay = 0.0  # the wait before the last restart; 0: none owed
        self.started = 0.0  # when the slot's child started (monotonic seconds)
        self.due: float | None = None  # when a restart waits for, else None

    def started_at(self, now: float) -> None:
        self.started, self.due = now, None

    def died_at(self, now: float) -> float:
        """The wait before the restart of a child found dead at `now`; `due` is set to it."""
        lived = now - self.started
        if lived >= SERVED_SECONDS:
            self.delay = 0.0
        if lived < QUICK_DEATH_SECONDS:
            self.delay = RESTART_FIRST_DELAY if not self.delay else min(self.delay * 2, RESTART_MAX_DELAY)
            wait = self.delay
        else:
            wait = 0.0
        self.due = now + wait
        return wait

    def is_due(self, now: float) -> bool:
        """Whether a restart waits and its time has come."""
        return self.due is not None and self.due <= now
