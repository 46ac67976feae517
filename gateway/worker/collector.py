"""The garbage collector tuned for a worker that holds tens of thousands of streams.

CPython's cyclic collector scans, at each full (generation 2) collection, every object it
tracks; a worker holding 10,000 streams tracks about a million (each stream's h11 and
hypercorn state, transport, task, coroutine frames). Measured in a 10,000-watcher storm
(loadtest/RESULTS.md): with the default thresholds (700, 10, 10) the population's growth set
off ten full collections in two minutes, each freeing nothing and holding the loop still for
0.3 to 5 s, longer than any other callback and past the stall watchdog's default.

- `tune`, once, after the imports and before serving: `gc.freeze()` moves everything made so
  far (modules, classes, functions: alive for good) to the permanent generation, which no
  collection scans; and the thresholds are raised so that a full collection may come only
  after YOUNG_ALLOCATIONS x MIDDLE_AFTER x FULL_AFTER net allocations (5 million: a storm of
  50,000 openings on 3 workers makes about 1.7 million a worker, and sets off none; CPython
  also waits until what was promoted since the last one is a quarter of the old objects).
  Young collections stay frequent and short, about the default's size (at most 10,000 objects
  in the middle generation), and collect the cycles that die young (a request's, a task's):
  with 5,000 allocations between them, a 50,000 storm's middle collections (50,000 objects,
  nearly all surviving) held a worker sharing its core for up to 3 s each.
- The price: a closed stream leaves about 35 objects in reference cycles (a full collection
  after 10,000 closed freed 350,105), which only a full collection frees. Between two, a
  worker holds at most the garbage of the streams that closed meanwhile, fewer than 5 million
  / ~100 objects a stream opening keeps = ~50,000 streams' worth, about as much as the
  streams themselves at that count.
"""

from __future__ import annotations

import gc

from gateway.tuning import FULL_AFTER, MIDDLE_AFTER, YOUNG_ALLOCATIONS


def tune() -> None:
    """Freeze what start-up made and raise the full collection's threshold (see above)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, MIDDLE_AFTER, FULL_AFTER)
