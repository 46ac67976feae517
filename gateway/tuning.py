"""The worker's tuning: numbers measured for speed or latency, not set by an operator.

None of these is a flag or a TOML key (those are `Config`'s, gateway/config.py): each trades
one cost against another inside a worker, and each was chosen by a run in loadtest/RESULTS.md.
They live together so that a change of one is seen beside the others it plays against.
"""

# Adaptive write coalescing (gateway/worker/coalesce.py): when the hub's pass over its open
# streams fills a share of the time between passes, the next pass waits a little so each
# write carries more events; the wait falls back to 0 when the share drops, or when events
# come too seldom for any wait up to the cap to catch a second one. A write costs about as
# much as seven events in it (the kernel's TCP send, most of a worker's CPU), so the shares
# are low: at 1,000 watchers x 100 events/s a pass is ~15% of the loop, and waiting then more
# than halves the writes. The cap bounds the latency it adds: p99 there is the cap plus about
# 17 ms, 42-44 ms at 25 ms against nchan's 45 in the same run (30 ms: 47-50; loadtest/RESULTS.md,
# run 7).
COALESCE_BUSY_SHARE = 0.15   # pass / interval at or above which the delay grows
COALESCE_IDLE_SHARE = 0.05   # at or below which it shrinks
COALESCE_STEP_SECONDS = 0.001  # added per busy pass
COALESCE_DECAY = 0.5         # the delay kept per light pass
COALESCE_FLOOR_SECONDS = 0.0005  # a shrunk delay under this is 0: light loads go out at once
COALESCE_MAX_SECONDS = 0.025  # never more
# A wake-up finding this many events not yet copied passes at once, delay or not: a burst
# must not carry a stream toward the lag limit (or the ring's end) while it waits
# (gateway/board.py checks it is below both).
COALESCE_MAX_EVENTS = 32

# The hub (gateway/worker/hub.py): its slow poll, which closes the window in which an armed
# flag and a head published at the same instant miss each other, and how often a long pass
# bumps the worker's beat word.
POLL_SECONDS = 0.05
PROGRESS_STREAMS = 1024  # a pass bumps the beat word once per this many streams written

# Catch-up (gateway/worker/catchup.py): the most one run writes for before the loop turns,
# in the thread's CPU time (a worker preempted on a shared core keeps its budget).
TURN_BUDGET_SECONDS = 0.005
# Heartbeats (gateway/worker/heartbeats.py): the one timer fires at most once a tick.
HEARTBEAT_TICK_SECONDS = 0.01

# Accepting (gateway/worker/hypercorn/accept.py, the balance policy in worker/process.py).
ACCEPT_BURST = 128  # at most this many accepts per readable event: ~5 ms of the loop
DEFER_SECONDS = 0.005  # a busier worker steps back from one readable event for this long
BALANCE_SLACK = 4  # streams a worker may hold beyond its least-loaded sibling before it defers

# Stream openings let through a turn of the loop (gateway/worker/pace.py): a storm's
# openings go on a few a turn, so its timers, I/O and catch-up run between them.
OPENINGS_PER_TURN = 16

# A worker hands glibc's free heap back every this many seconds (gateway/worker/malloc_trim.py).
HEAP_TRIM_SECONDS = 5.0
