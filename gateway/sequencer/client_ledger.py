"""The sequencer's exact counts behind the per-client and per-token limits. No I/O.

Why in the sequencer: a client's streams land on any worker (and all of one HTTP/2
connection's streams on one), so only a single counter that every worker asks gives the
same answer across workers. The sequencer is one process on one event loop, so an
`acquire` is checked and counted in one step: two workers asking at once cannot both take
the last place. A worker asks only when a limit is set; with none, nothing here is used.

- `StreamLedger`: open streams per key (`client_streams` keys a client address, IPv4 /32 or
  IPv6 /64; `token_streams` a token's name). Each worker's control connection has its own
  `Holdings`; when that connection closes (the worker ended or died), everything it held
  is released at once, so a dead worker's streams never keep their places.
- `RateBuckets`: a token bucket per client key for --client-request-rate / -burst. The table
  is client-controlled (any address may ask), so it is bounded: a bucket that has refilled
  is the same as none and is dropped, and past `LEDGER_MAX_BUCKETS` the least recently used goes.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict

from gateway.tuning import LEDGER_MAX_BUCKETS


class Holdings(Counter):
    """What one worker's control connection holds: key -> open streams."""


class StreamLedger:
    def __init__(self) -> None:
        self.open: Counter[str] = Counter()

    def acquire(self, held: Holdings, wanted: list[tuple[str, int]]) -> int | None:
        """Take one place under every (key, limit) of `wanted`, or none: the index of the
        first whose limit is reached (nothing taken), or None (all taken)."""
        for index, (key, limit) in enumerate(wanted):
            if self.open[key] >= limit:
                return index
        for key, _limit in wanted:
            self.open[key] += 1
            held[key] += 1
        return None

    def release(self, held: Holdings, keys: list[str]) -> None:
        """Give back one place under each key this connection holds (others are ignored)."""
        for key in keys:
            if held[key] > 0:
                self._drop(held, key, 1)

    def release_all(self, held: Holdings) -> None:
        for key, count in list(held.items()):
            self._drop(held, key, count)

    def _drop(self, held: Holdings, key: str, count: int) -> None:
        held[key] -= count
        if held[key] <= 0:
            del held[key]
        self.open[key] -= count
        if self.open[key] <= 0:
            del self.open[key]


class RateBuckets:
    def __init__(self, capacity: int = LEDGER_MAX_BUCKETS) -> None:
        self.capacity = capacity
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str, rate: float, burst: float, now: float) -> int:
        """Take one request from `key`'s bucket: 0 when granted, else the whole seconds until
        one is there (Retry-After). A bucket holds at least one request."""
        burst = max(burst, 1.0)
        self._forget_full(rate, burst, now)
        tokens, at = self.buckets.pop(key, (burst, now))
        tokens = min(burst, tokens + (now - at) * rate)
        if tokens >= 1.0:
            tokens -= 1.0
            wait = 0
        else:
            wait = max(1, math.ceil((1.0 - tokens) / rate))
        if len(self.buckets) >= self.capacity:
            self.buckets.popitem(last=False)
        self.buckets[key] = (tokens, now)
        return wait

    def _forget_full(self, rate: float, burst: float, now: float) -> None:
        """Drop, oldest first, every bucket that has refilled (it equals a new one)."""
        buckets = self.buckets
        while buckets:
            key, (tokens, at) = next(iter(buckets.items()))
            if tokens + (now - at) * rate < burst:
                return
            del buckets[key]
