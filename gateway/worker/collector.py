"""The garbage collector tuned for a worker that holds tens of thousands of streams.

CPython's cyclic collector scans, at each full (generation 2) collection, every object it
tracks. When a stream still carried hypercorn's and h11's state, a worker holding 10,000
streams tracked about a million objects, and in a 10,000-watcher storm (loadtest/RESULTS.md)
the default thresholds (700, 10, 10) set off ten full collections in two minutes, each
freeing nothing and holding the loop still for 0.3 to 5 s. An open stream is now about 11
tracked objects (5,000 open on one worker: 55,193 tracked, 190 before them), so a full
collection over 17,000 streams (100,000 on 6 workers) scans about 190,000; the tuning
below still keeps a storm clear of them.

- `tune`, once, after the imports and before serving: `gc.freeze()` moves everything made so
  far (modules, classes, functions: alive for good) to the permanent generation, which no
  collection scans; and the thresholds are raised so that a full collection may come only
  after YOUNG_ALLOCATIONS x MIDDLE_AFTER x FULL_AFTER net allocations (5 million: a storm of
  50,000 openings on 3 workers makes about 1.7 million a worker, and sets off none; CPython
  also waits until what was promoted since the last one is a quarter of the old objects).
  Young collections stay frequent and short, about the default's size (at most 10,000 objects
  in the middle generation): with 5,000 allocations between them, a 50,000 storm's middle
  collections (50,000 objects, nearly all surviving) held a worker sharing its core for up
  to 3 s each.
- What it costs: nothing left waiting for a full collection, today. Neither an opening nor a
  stream's end makes cyclic garbage (5,000 streams opened and closed: `gc.collect()` found
  none, while open or after); a closed stream's objects are freed by their counts, the last
  ones when its heartbeat's entry leaves the schedule (within one heartbeat interval).
"""

from __future__ import annotations

import gc

from gateway.tuning import FULL_AFTER, MIDDLE_AFTER, YOUNG_ALLOCATIONS


def tune() -> None:
    """Freeze what start-up made and raise the full collection's threshold (see above)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, MIDDLE_AFTER, FULL_AFTER)
