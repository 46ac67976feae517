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
  collection scans; and the thresholds are set so that a full collection may come only
  after YOUNG_ALLOCATIONS x (MIDDLE_AFTER + 2) x FULL_AFTER net allocations (5 million: a
  storm of 50,000 openings on 3 workers makes about 1.7 million a worker, and sets off none;
  CPython also waits until what was promoted since the last one is a quarter of the old
  objects).
- Young and middle collections alternate, each after 500 allocations: an open stream's
  objects (its front, stream, access-log record, uvloop's transport and what that holds) are
  scanned at most twice (young, then middle; those made just before a middle collection
  once), soon after they were made, then left to the full ones. The scan's cost is the
  cache's more than the objects': 15,000 openings on one worker spent 209-223 ms in the
  collector with (1,000, 10) (a middle collection over up to 12,000 objects made since the
  last, cold), 108-131 ms with these, about 7 µs an opening (loadtest/RESULTS.md, run 16).
  Middle collections stay far below the size that held a worker sharing its core for up to
  3 s in a 50,000 storm (5,000 allocations between young ones). Measured on CPython 3.11
  (the image's, and CI's): a later CPython whose collector reads these thresholds otherwise
  (3.14's incremental one) must be measured again.
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
