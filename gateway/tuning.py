"""The gateway's tuning: numbers measured for speed, latency or memory, not set by an operator.

None of these is a flag or a TOML key (those are `Config`'s, gateway/config/options.py): each trades
one cost against another inside a process, and each stands beside the run that chose it
(loadtest/RESULTS.md), or says it is a bound chosen without one. They live together, each
under one name its users import, so that a change of one is seen beside the others it plays
against; the relations between them are checked at the end, at import, as gateway/common/board.py
checks the ring's.
"""

# Adaptive write coalescing (gateway/worker/delivery/coalesce.py): when the hub's pass over its open
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
# (gateway/common/board.py checks it is below both).
COALESCE_MAX_EVENTS = 32

# The pump (gateway/worker/delivery/pump.py): its slow poll, which closes the window in which an
# armed flag and a head published at the same instant miss each other.
POLL_SECONDS = 0.05
# A pass over at most PASS_WHOLE_STREAMS streams is written in one callback (~5-10 ms at the
# measured ~5-10 us a write); a longer one for at most PASS_SLICE_SECONDS a turn of the loop,
# the rest on the next turns in order (hub.py). At 1 event/s a 50,000 storm's pass was ~16,700
# writes a worker in one callback, and three workers on one core stood their loops still for
# 1-2.5 s (RESULTS.md run 11). Between two slices the loop runs its openings (the pace's
# OPENINGS_PER_TURN), accepts and timers, so a crowd gathering while events flow is not held
# behind passes: 100,000 at 1 event/s on 6 workers sharing one core gathered in 198 s at
# 4,096 streams a turn, 68 s at 1,024, 39.6 s at 256, 33.2 s at 64 (RESULTS.md run 14). A
# short pass is not sliced, for slices cost deliveries: 1,000 watchers at 100 events/s took
# 5.5-5.9 us a delivery in 5 ms slices against 4.0-4.5 whole (run 14). The gathering above in
# 5 ms slices: 24.9 s from any length, 24.0 s past 1,024 streams, 30.9 s past 4,096.
PASS_WHOLE_STREAMS = 1024
PASS_SLICE_SECONDS = 0.005

# Catch-up (gateway/worker/delivery/catchup.py): the most one run writes for before the loop turns,
# in the thread's CPU time (a worker preempted on a shared core keeps its budget).
TURN_BUDGET_SECONDS = 0.005

# The window (gateway/worker/delivery/window.py) and the writes it makes. A write carries at most a
# piece, so a replay of the whole 512-event buffer (~350 KB at ~300 B an event, RESULTS.md
# "under load", item 6) is a few writes, each made when the one before has left, never one
# join of the whole buffer per new watcher (the heap's high-water mark). The joins a watcher
# shares cost it 364 B live under load (RESULTS.md, memparts); the two caps bound them, and
# were chosen, not measured: most watchers send one request id, so a few prefixes cover them.
PIECE_BYTES = 64 * 1024  # the most one write carries, replay or catch-up (one event at least)
MAX_BATCHES = 256  # joined batches kept per head (distinct cursor x request id)
MAX_CACHED_JOINS = 4  # request prefixes an entry keeps joined
# What a delivery costs, fitted at 1,000 watchers x 100 events/s (RESULTS.md run 7, 10:40):
# about 0.6 us an event plus 4.2 us a write; events there were ~300 B. A piece's write is then
# ~135 us, which a turn's budget must hold many times over (checked below).
DELIVERY_SECONDS_PER_EVENT = 0.6e-6
DELIVERY_SECONDS_PER_WRITE = 4.2e-6
MEASURED_EVENT_BYTES = 300
PIECES_PER_TURN_AT_LEAST = 8  # a budget that holds fewer would turn the loop for every piece
# Heartbeats (gateway/worker/delivery/heartbeats.py): the one timer fires at most once a tick.
HEARTBEAT_TICK_SECONDS = 0.01

# The lapped-replay budget (gateway/worker/delivery/lapped.py): what replays the ring has lapped may
# keep alive in a worker beyond its window, unless --max-lapped-replay-bytes says otherwise. One
# window's worth at the ring's default arena (64 MiB, shm/ring.py): a worker holds at most two
# windows of events whatever its replays do. Measured against: six replayers reading ~6 KB/s a
# lap apart at --sim-load 50 --sim-load-size 50000 (a lap ~25 MB) held +186 MiB with no bound
# (issue 47); each lapped view there is ~25 MB of events, so two of them fit. How often the hub
# measures it while a replay is open: what it may pass the budget by is what the ring writes in
# that time; a measurement walks only the entries it counts, so a bound chosen, not measured.
LAPPED_REPLAY_BYTES = 64 << 20
LAPPED_CHECK_SECONDS = 0.25

# Accepting (gateway/worker/http/accept.py, the balance policy in worker/balance.py).
ACCEPT_BURST = 128  # at most this many accepts per readable event: ~5 ms of the loop
DEFER_SECONDS = 0.005  # a busier (or full) worker steps back from a readable event for this long
BALANCE_SLACK = 4  # streams a worker may hold beyond its least-loaded sibling before it defers
# A sibling whose beat word (gateway/common/stall.py) stood still this long, as a worker's balance
# saw it, is no room to wait for (stopped, stuck, or not yet serving): a full worker then accepts
# and answers 503 rather than leave the connection in the queue. Long enough that a live loop is
# not taken for a stopped one: it beats every PULSE_SECONDS, and its hub as it writes, inside long
# turns too; the 50,000-watcher storms' pulses ran at most 1 s late (p99 250 ms) with three
# workers and the sequencer on one core, 2.5-5 s only on a box at load 10-20 (loadtest/RESULTS.md),
# and a live one taken for stopped costs a 503 its client retries (Retry-After: 1). Short enough
# that a connection waiting on a stopped or stuck sibling is answered within about this.
SIBLING_SILENT_SECONDS = 2.0
# Out of file descriptors (or memory), accepting pauses this long, the kernel queueing meanwhile:
# the listener is level-triggered, so without a pause the loop would spin. A bound chosen, not measured.
RETRY_SECONDS = 1.0

# Stream openings let through a turn of the loop (gateway/worker/pace.py): a storm's
# openings go on a few dozen a turn, so its timers, I/O and catch-up run between them. An
# opening the front serves costs about 0.1 ms of CPU (loadtest/RESULTS.md), so a turn's
# openings hold the loop about 6 ms, as an accept burst does.
OPENINGS_PER_TURN = 64

# Owner codes a worker keeps (gateway/worker/opening.py): a murgw.WatchOwnTasks opening asks the
# sequencer for its caller's code once, so a storm of a user's reconnects makes no control
# call each; about 150 bytes an entry, the lot forgotten when full (the sequencer's codes
# never change in a gateway's life, so forgetting costs only the calls).
OWNER_CODES_KEPT = 4096

# A worker hands glibc's free heap back every this many seconds (gateway/worker/malloc_trim.py).
HEAP_TRIM_SECONDS = 5.0

# The cyclic garbage collector (gateway/worker/collector.py, whose docstring has the whole
# account). In a 10,000-watcher storm (RESULTS.md) the default thresholds (700, 10, 10) set off
# ten full collections in two minutes, each freeing nothing and holding the loop still 0.3 to
# 5 s. With these, a full collection may come only after 500 x (0 + 2) x 5,000 = 5 million net
# allocations: a 50,000 storm on 3 workers makes about 1.7 million a worker and sets off none.
# A middle collection follows every young one (MIDDLE_AFTER 0), so what survives is scanned at
# most twice while it is still in the cache, then left for the full ones: 15,000 openings on one
# worker spent 108-131 ms in the collector, against 209-223 ms with (1,000, 10) (RESULTS.md
# run 16). Middle collections stay small (at most 10,000 objects): with 5,000 allocations
# between young ones, a 50,000 storm's middle collections held a worker sharing its core for
# up to 3 s each.
YOUNG_ALLOCATIONS = 500  # net allocations between two generation-0 collections (default 700)
MIDDLE_AFTER = 0  # a generation-1 collection comes once more generation-0 ones than this ran since the last
FULL_AFTER = 5_000  # generation-1 collections before a full one may run (default 10)
STORM_ALLOCATIONS_PER_WORKER = 1_700_000  # the 50,000-watcher storm's, measured above
MIDDLE_GENERATION_MOST = 10_000  # middle collections this small stayed short in that storm

# The listening socket's TCP_NOTSENT_LOWAT (gateway/supervisor/process.py): a stalled reader falls
# behind, and lags, after about this much unsent, not after megabytes of kernel buffer (the
# plan of 64 KiB a watcher in gateway/config/capacity.py counts it). Tried as a CPU saving on run 7's
# stream connections, it changed nothing (2.70 against 2.64 us a delivery, RESULTS.md run 7).
NOTSENT_LOWAT_BYTES = 16 * 1024

# The stall watchdog's pulse (gateway/common/stall.py): each worker's loop bumps its beat word this
# often, and the supervisor looks at its children as often; loop_stall_seconds counts how late
# it ran. A bound chosen, not measured: fine enough for the storms' ≤ 250 ms target
# (RESULTS.md), coarse enough to cost nothing (four timer callbacks a second).
PULSE_SECONDS = 0.25

# Probes (/healthz, /readyz) a worker computes at once (gateway/worker/door/admission.py):
# a probe holds its place only until its answer is computed (never while its client does
# not read it), so more in flight on one worker is a flood; one client address holds at
# most PROBES_PER_CLIENT of them. Bounds chosen, not measured.
PROBES_IN_FLIGHT = 16
PROBES_PER_CLIENT = 4

# Requests one HTTP/1.1 connection serves before its answer closes it (hypercorn's
# keep_alive_max_requests, which the front of HTTP/1.1 connections took over).
KEEP_ALIVE_REQUESTS = 1000
# Body bytes the front of an HTTP/1.1 connection (gateway/worker/http/front.py) reads ahead of
# the app before it stops reading, so an app slow to take a body holds about this much of it
# in memory, not the whole --max-body-bytes. A bound chosen, not measured.
BODY_BUFFERED = 64 * 1024
# A chunked body's bounds (gateway/worker/http/body.py): a chunk-size line, or one trailer line,
# longer than LINE_MOST is refused 400, as are more than TRAILER_MOST trailer bytes. h11 bounds
# the same lines; these are chosen, well past any real client's.
LINE_MOST = 1024
TRAILER_MOST = 8192
# What a plain HTTP request sent to a TLS door may hold (gateway/worker/http/plain_http.py): read
# and dropped up to this many bytes before the 400 is sent and the connection closed.
DRAIN_BYTES = 1 << 16
# The access log's `path` field (gateway/worker/access_log.py) is cut at this many characters: a
# client controls it, and a line per request must stay one line of bounded size.
MAX_PATH_CHARS = 200
# Distinct response heads gateway/worker/http/framing.py keeps made (the stream's, each
# refusal's): a few in practice; the cap keeps a head that varies from growing the cache.
MAX_CACHED_HEADS = 64

# Stopping. A worker's requests get GRACE_SECONDS to finish once it is told to stop
# (hypercorn's HTTP/2 connections, and the front's app runs: gateway/worker/server.py);
# the supervisor waits DRAIN_SECONDS for its workers before it stops the sequencer and exporter
# (gateway/supervisor/process.py), so a worker's grace ends within the drain (checked below).
# Both well inside systemd's TimeoutStopSec and Kubernetes' grace period (deploy/). Bounds
# chosen, not measured.
GRACE_SECONDS = 2.0
DRAIN_SECONDS = 3.0

# JWTs a worker keeps verified (gateway/worker/door/jwt/verifier.py), by the token's sha256,
# each until its `exp`; the oldest goes first. An entry is its digest and its rule, about
# 0.5 KiB, so at most about 2 MiB a worker, only where the JWT table is declared: room for
# the tokens of every watcher a worker holds at 4,096 users reconnecting, not for a storm of
# strangers (whose tokens are each verified once anyway). A bound chosen, not measured.
JWT_VERIFIED_KEPT = 4096

# `jwks_url` (gateway/sequencer/jwks.py): the set is fetched again every JWKS_REFRESH_SECONDS
# (a provider publishes a new key well ahead of signing with it: 5 minutes is short beside a
# rotation's overlap), and on a token naming an unknown `kid` at most once per
# JWKS_STALE_SECONDS (made-up kids cost the provider one fetch per period); a fetch has
# JWKS_FETCH_SECONDS in all, connection and TLS included. Bounds chosen, not measured.
JWKS_REFRESH_SECONDS = 300.0
JWKS_STALE_SECONDS = 5.0
JWKS_FETCH_SECONDS = 10.0

# A connection the gateway closes keeps what it has not sent for at most this long, then is
# aborted (gateway/worker/http/transport_sink.py `close`, hypercorn's closes: h2_idle.py):
# uvloop keeps a closed transport until its write buffer drains, so a client that pipelines
# and never reads held its connection, its descriptor and its answers for as long as it
# liked. A live client drains a closing answer (at most a write buffer above the kernel's)
# in far less; a bound chosen, not measured (SECURITY.md, connection states).
CLOSE_GRACE_SECONDS = 5.0

# How often a worker looks for a reload the sequencer announced (gateway/worker/reload.py),
# per heartbeat interval: a reload is seen within a quarter of one, so a revoked token's
# streams end within one interval (docs/operations.md, "Reloading"); a bound chosen, not measured.
CHECKS_PER_HEARTBEAT = 4

# How long a browser may keep a CORS preflight's answer (Access-Control-Max-Age, gateway/worker/
# door/cors.py): a page's every POST with a JSON body and a token is preflighted, so without it
# each costs a second round trip. Chromium caps it at 7,200 s; 600 is Starlette's default, so a
# reload that removes an origin reaches a page's cached preflight within 10 minutes (its requests
# are refused at once). A bound chosen, not measured.
CORS_MAX_AGE_SECONDS = 600


# Restarting a child that died (gateway/supervisor/restarts.py): one that dies within
# QUICK_DEATH_SECONDS of its spawn (imports included) would die again at once, so it waits,
# RESTART_FIRST_DELAY doubling up to RESTART_MAX_DELAY; one that served SERVED_SECONDS clears
# the count. Bounds chosen, not measured: a second or more of a small box's start inside the
# first, a log line every half a minute at worst.
QUICK_DEATH_SECONDS = 10.0
RESTART_FIRST_DELAY = 0.25
RESTART_MAX_DELAY = 30.0
SERVED_SECONDS = 60.0

# The supervisor (gateway/supervisor/process.py): the metrics socket's listen backlog (a
# scraper or two, not clients), and how long a SIGHUP's `reload` call waits for the sequencer.
# Bounds chosen, not measured.
METRICS_BACKLOG = 64
RELOAD_SECONDS = 5.0

# The stall watch (gateway/common/stall.py): a worker whose beat never moved since its start
# is judged only after STALL_STARTUP_SECONDS (imports, attaching). A bound chosen, not measured.
STALL_STARTUP_SECONDS = 30.0

# A control message (gateway/common/control.py) at most: a task's whole history or an
# attachment travels in one. A bound chosen, not measured.
CONTROL_MAX_MESSAGE = 64 << 20

# The default --max-connections (gateway/config/capacity.py): the descriptors a worker may open
# less FD_RESERVE for all that is not a client (segments, sockets, imports, an accept burst),
# or MEMORY_SHARE of the memory available at PLAN_BYTES_PER_WATCHER each, the smaller. An idle
# watcher costs about 10 KiB all in (docs/benchmarks.md, "The figures other pages quote"); the
# plan has headroom for a watcher that falls behind (up to ~16 KiB unsent before it lags), for
# replays and for traffic. Bounds chosen beside that measurement.
FD_RESERVE = 128
PLAN_BYTES_PER_WATCHER = 64 << 10
MEMORY_SHARE = 0.5

# How alike (difflib's ratio, 0 to 1) a misspelt setting and a known one must be for the known
# one to be suggested (gateway/config/file.py): `audiance` (0.88) and `authenticaton` (0.96)
# pass; `max_turns` against `max_task_reopens` (0.64), a different word, does not.
TYPO_LIKENESS = 0.8

# A JWT key file, or a fetched JWKS, at most (gateway/config/jwt/keys.py, gateway/sequencer/
# jwks.py), and the keys a set may hold: those in use and those retiring, not a directory. A
# verified token's `sub` at most, and the words of its `scope` read (gateway/worker/door/jwt/
# claims.py): a caller's name, and a token minted for several services. Bounds chosen.
MAX_KEY_BYTES = 64 * 1024
MAX_SET_KEYS = 16
JWT_MAX_SUBJECT = 256
JWT_MAX_SCOPE_WORDS = 64

# The per-client limits count an IPv6 client by its /64 (gateway/worker/door/client_address.py):
# one subscriber's network, which its addresses are drawn from at will. A choice, not a measure.
IPV6_KEY_PREFIX = 64

# Retry-After on a 503 (gateway/worker/door/asgi_http.py): a worker at its limits asks a client
# to come back in a second, when streams have likely ended or moved. A bound chosen.
RETRY_AFTER_SECONDS = 1

# The agent card (gateway/worker/card.py): what its cache-control lets clients keep (the worker
# reads an upstream's card again after it), and the hosts it keeps a card built for. Chosen.
CARD_MAX_AGE_SECONDS = 300
CARD_CACHED_HOSTS = 64

# The upstream link (gateway/sequencer/capsule/): a body at most, the TCP and TLS connect, a
# whole request (a call, the card, an attachment) at most, a stream request's opening (its
# time and bytes until the opening task), the reconnect's wait doubling from
# UPSTREAM_BACKOFF_FIRST up to UPSTREAM_BACKOFF_CAP, the attachment bytes kept, and how long
# the upstream's card is kept. Bounds chosen, not measured.
UPSTREAM_MAX_BODY = 64 << 20
UPSTREAM_CONNECT_SECONDS = 5.0
UPSTREAM_REQUEST_SECONDS = 30.0
UPSTREAM_OPENING_SECONDS = 30.0
UPSTREAM_OPENING_BYTES = 1 << 20
UPSTREAM_BACKOFF_FIRST = 0.1
UPSTREAM_BACKOFF_CAP = 5.0
ATTACHMENT_CACHE_BYTES = 32 << 20
UPSTREAM_CARD_SECONDS = 30.0

# A message's `messageId` at most (gateway/sequencer/capsule/messages.py); the client buckets
# the sequencer's ledger keeps for the per-client rate, the least recently used going first
# (gateway/sequencer/client_ledger.py). Bounds chosen.
MAX_MESSAGE_ID = 256
LEDGER_MAX_BUCKETS = 65536

# What a person runs (gateway/commands/): the healthcheck's one request, and a new token's
# random bytes (256 bits: a guess far less likely than the 2**-160 RFC 6749 section 10.10 asks).
HEALTHCHECK_SECONDS = 2.0
TOKEN_BYTES = 32

# mur watch (gateway/watch/client.py): its connect, its one look at /readyz when a stream ends,
# how far this host's clock may run behind the gateway's when a JWT's `exp` is judged, a
# read's size, and a token file at most. Bounds chosen, not measured.
WATCH_CONNECT_SECONDS = 10.0
WATCH_PROBE_SECONDS = 2.0
CLOCK_SKEW_SECONDS = 60.0
WATCH_READ_BYTES = 65536
MAX_TOKEN_FILE_BYTES = 64 * 1024


def _broken() -> list[str]:
    """The relations between these numbers that do not hold (none, or the import stops)."""
    piece_seconds = (PIECE_BYTES / MEASURED_EVENT_BYTES * DELIVERY_SECONDS_PER_EVENT
                     + DELIVERY_SECONDS_PER_WRITE)
    relations = [
        (piece_seconds * PIECES_PER_TURN_AT_LEAST <= TURN_BUDGET_SECONDS,
         f"a turn's budget ({TURN_BUDGET_SECONDS} s) must hold {PIECES_PER_TURN_AT_LEAST} pieces of "
         f"PIECE_BYTES ({PIECE_BYTES}: ~{piece_seconds * 1e6:.0f} us each at the measured cost)"),
        (COALESCE_MAX_SECONDS < POLL_SECONDS,
         "the coalescing cap must be below the slow poll, which would otherwise cut its waits short"),
        (max(HEARTBEAT_TICK_SECONDS, TURN_BUDGET_SECONDS, POLL_SECONDS) < PULSE_SECONDS,
         "the heartbeat tick, a turn's budget and the slow poll must each fit in a stall pulse"),
        (PULSE_SECONDS < SIBLING_SILENT_SECONDS,
         "a live worker's beat must move within the time after which a sibling is taken for silent"),
        (OPENINGS_PER_TURN <= ACCEPT_BURST,
         "OPENINGS_PER_TURN above ACCEPT_BURST would never hold a burst's openings back"),
        (YOUNG_ALLOCATIONS * (MIDDLE_AFTER + 2) * FULL_AFTER > STORM_ALLOCATIONS_PER_WORKER,
         "a full collection must not come within a measured storm's allocations"),
        (YOUNG_ALLOCATIONS * (MIDDLE_AFTER + 2) <= MIDDLE_GENERATION_MOST,
         "middle collections must stay as short as the storm measured them"),
        (min(MAX_BATCHES, MAX_CACHED_JOINS, PROBES_IN_FLIGHT, PROBES_PER_CLIENT, KEEP_ALIVE_REQUESTS,
             CHECKS_PER_HEARTBEAT) >= 1,
         "every cap and count must be at least 1"),
        (PROBES_PER_CLIENT < PROBES_IN_FLIGHT, "one client address must not take every probe place"),
        (GRACE_SECONDS < DRAIN_SECONDS, "a worker's grace must end within the supervisor's drain"),
        (min(MAX_CACHED_HEADS, BODY_BUFFERED) >= 1, "every cap must be at least 1"),
        (RESTART_FIRST_DELAY <= RESTART_MAX_DELAY and UPSTREAM_BACKOFF_FIRST <= UPSTREAM_BACKOFF_CAP,
         "a doubling wait must start at or below its cap"),
        (QUICK_DEATH_SECONDS < SERVED_SECONDS, "a child that served must have lived past a quick death"),
        (UPSTREAM_OPENING_BYTES <= UPSTREAM_MAX_BODY, "an opening must fit in an upstream body"),
    ]
    return [why for holds, why in relations if not holds]


if _broken():  # an import-time check that survives python -O
    raise AssertionError("gateway/tuning.py: " + "; ".join(_broken()))
