"""A quantile estimated from a Prometheus histogram, as Prometheus's `histogram_quantile` does it.

The gateway's heartbeat jitter is a histogram (`murgw_heartbeat_jitter_seconds`): its buckets,
not its samples, are all a client can read. The bound of the bucket a quantile falls in is not
a quantile (a p99 that sits on 25 ms for a whole run is a bucket's edge); Prometheus's estimate
interpolates linearly inside that bucket, and so does this, so the bench's table and the
report's chart give the figure a dashboard would, from the same buckets.
"""

from __future__ import annotations


def quantile(cumulative: dict[float, float], q: float) -> float | None:
    """The q-quantile of cumulative bucket counts {upper bound: count} (+Inf as float("inf")):
    linear within its bucket; the highest finite bound when it falls in +Inf; None when empty."""
    buckets = sorted(cumulative.items())
    if not buckets or not buckets[-1][1]:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower
