"""How long the hub waits before its next pass over the open streams (adaptive coalescing).

A pass wakes every stream that has something new and writes it; its cost is mostly per
write, not per event. While passes are cheap next to the time between them the hub runs
each at once (sub-millisecond delivery). When a pass fills a large share of the loop, the
next one waits a little, so the events written meanwhile leave in the same write: the wait
grows by a step each busy pass, up to a cap that bounds the added latency, and halves each
light pass until it is 0 again. Between the two shares it holds, so it does not oscillate.
A wait is worth its latency only when another event comes within it: where the last pass's
events came slower than one per cap (10,000 watchers of 10 events a second: a busy loop, and
no wait up to the cap would put two events in a write), it shrinks as under light load.

Pure: the hub measures, this decides. The knobs are named in gateway/tuning.py.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway import tuning


class Knobs(NamedTuple):
    busy_share: float = tuning.COALESCE_BUSY_SHARE
    idle_share: float = tuning.COALESCE_IDLE_SHARE
    step: float = tuning.COALESCE_STEP_SECONDS
    decay: float = tuning.COALESCE_DECAY
    floor: float = tuning.COALESCE_FLOOR_SECONDS
    max_delay: float = tuning.COALESCE_MAX_SECONDS


KNOBS = Knobs()


def load_share(pass_seconds: float, interval_seconds: float) -> float:
    """The share of the loop the pass took, in [0, 1]: pass time over the time since the
    previous pass began (a pass never takes more than all of it)."""
    if pass_seconds <= 0:
        return 0.0
    return min(1.0, pass_seconds / max(interval_seconds, pass_seconds))


def next_delay(pass_seconds: float, interval_seconds: float, current_delay: float, events: int,
               knobs: Knobs = KNOBS) -> float:
    """Seconds to wait before the next pass, in [0, knobs.max_delay].

    `pass_seconds`: how long the pass that just ended took; `interval_seconds`: from the
    start of the previous pass to the start of this one (so it includes the delay that
    preceded it); `current_delay`: the delay in force; `events`: the new events the pass
    copied (they arrived within the interval)."""
    current = min(max(current_delay, 0.0), knobs.max_delay)
    share = load_share(pass_seconds, interval_seconds)
    catches_more = events * knobs.max_delay >= interval_seconds  # at least one per cap
    if share >= knobs.busy_share and catches_more:
        return min(knobs.max_delay, current + knobs.step)
    if share <= knobs.idle_share or not catches_more:
        shrunk = current * knobs.decay
        return 0.0 if shrunk < knobs.floor else shrunk
    return current
