"""Metrics: every process counts into its own block of shared memory; the exporter sums them.

Why not prometheus-client's multiprocess mode: 3x slower per update and it keeps dead
processes' files forever (docs/architecture.md, "Why it is built this way"). Here an update
is a plain 8-byte add into the process's own block (one writer per block, so no atomics),
and the exporter's collector reads every block at scrape time. Every series exists, at zero, from start-up.

Which process owns which block is the board's (gateway/common/board.py); what each word of a block
counts is here. A restarted worker's block is folded into the supervisor's retired totals
first, so counters stay monotonic, and then cleared.
"""

from __future__ import annotations

import os
from bisect import bisect_left

from gateway.common import board
from gateway.common.board import Role
from gateway.protocol.activation import SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK, WATCH_OWN_TASKS, WATCH_SESSION
from gateway.protocol.errors import ERRORS
from gateway.protocol.lag import LAG_LIMIT
from gateway.common.stall import PULSE_SECONDS
from shm import CounterBlocks

PREFIX = "murgw_"
ENDPOINTS = (WATCH_SESSION, SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK, WATCH_OWN_TASKS)
REPLAY_OUTCOMES = ("replayed", "gap", "none")
JSONRPC_CODES = tuple(str(code) for code in ERRORS)  # every code the gateway can answer
LAG_BUCKETS = (0,) + tuple(1 << i for i in range(board.RING_SLOTS.bit_length()))  # 0, 1, 2, 4 .. the ring's slots
JITTER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MICRO = 1_000_000
LIMITS = ("client_streams", "client_rate", "token_streams")  # the door's 429s (worker/door/limits.py)
RELOAD_OUTCOMES = ("applied", "rejected")
# The refusals the door counts (requests_refused{reason}), by HTTP status: the door's and
# capacity's, and the answers to a request head no route sees (400, 431, 501, 505); never a
# JSON-RPC error (those count by code) nor a 503 for an unreachable sequencer or upstream (the
# gateway's trouble, not a refusal). A 400 for a head two readers could read two ways
# (worker/door/head.py's `AMBIGUITIES`) counts as AMBIGUOUS, apart from a merely malformed one.
REFUSAL_REASONS = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
                   405: "method_not_allowed", 408: "timeout", 413: "body_too_large", 431: "headers_too_large",
                   501: "not_implemented", 503: "capacity", 505: "version_not_supported"}
AMBIGUOUS = "ambiguous"  # request smuggling's forms, two Authorization headers
REFUSAL_LABELS = (*REFUSAL_REASONS.values(), AMBIGUOUS)
# Why streams end: the access log's `reason` of a `stream end` line (worker/access_log.py). A wave
# of `expired` is token churn: tokens minted together end together.
STREAM_END_REASONS = ("client_left", "task_ended", "session_closed", "session_changed", "revoked",
                      "expired", "lapped", "drain", "aborted")
# Kind "worker": a gauge exported per worker (`process="worker-N"`), never summed nor folded into
# the retired totals: a 503 comes from one worker's --max-connections, not from the gateway's sum.
WORKER_GAUGES = {
    "worker_requests_open": "Requests a worker has in progress, open streams included: what its "
                            "--max-connections bounds (503 beyond).",
    "worker_max_connections": "A worker's --max-connections: the requests in progress it takes before "
                              "answering 503.",
}
# Why the door refused a bearer token, for the operator (the client's 401 is one for all):
# tokens_refused{problem} and the access line's `token_problem` (gateway/worker/door/jwt/claims.py,
# verifier.py; a static token past its `expires` is `expired` too).
TOKEN_PROBLEMS = ("expired", "not_yet_valid", "signature", "algorithm", "issuer", "audience",
                  "unknown_key", "claims", "malformed")
IDLE_GAUGE = "connections_idle"  # connections with no request or stream: the accept loop's, the front's, hypercorn's

# name -> (kind, help, label name or None, label values)
COUNTERS = {
    "events_written": ("counter", "Events the sequencer wrote to the ring.", None, ()),
    "connections_open": ("gauge", "Open streaming connections.", "endpoint", ENDPOINTS),
    "connections": ("counter", "Streaming connections opened.", "endpoint", ENDPOINTS),
    IDLE_GAUGE: ("gauge", "Connections held that belong to no request or stream: accepted and not yet served "
                 "(a TLS handshake), waiting for a request head, HTTP/2 with no open stream, or closing with "
                 "answers unsent (SECURITY.md, connection states).",
                 None, ()),
    "events_delivered": ("counter", "Numbered events written to connections.", "endpoint", ENDPOINTS),
    "sends": ("counter", "Batched writes to connections (one per wake-up per connection).",
              "endpoint", ENDPOINTS),
    "events_lost_to_lag": ("counter", f"Ring events connections skipped under the {LAG_LIMIT}-event lag limit.",
                           "endpoint", ENDPOINTS),
    "lagged_frames": ("counter", "lagged frames written.", "endpoint", ENDPOINTS),
    "replays": ("counter", "Stream openings by replay outcome.", "outcome", REPLAY_OUTCOMES),
    "heartbeats": ("counter", "Heartbeats written.", None, ()),
    "heartbeats_blocked": ("counter", "Heartbeats that came due while their stream's bytes waited to leave (its "
                           "client not reading): written once they left, one for several due, never counted as jitter.",
                           None, ()),
    "worker_restarts": ("counter", "Worker processes the supervisor replaced.", None, ()),
    "exporter_restarts": ("counter", "Metrics exporters the supervisor replaced.", None, ()),
    "requests_refused": ("counter", "Requests the door refused (HTTP status, problem details), by reason; "
                         "capacity: 503 at --max-connections; ambiguous: 400, a head two readers could read "
                         "two ways.", "reason", REFUSAL_LABELS),
    "jsonrpc_errors": ("counter", "JSON-RPC error answers, by code.", "code", JSONRPC_CODES),
    "requests_limited": ("counter", "Requests answered 429 by a per-client or per-token limit.",
                         "limit", LIMITS),
    "tokens_refused": ("counter", "Bearer tokens the door refused (each a 401 of an unknown token), by why: "
                       "a JWT's failed check, or a token past its expiry.", "problem", TOKEN_PROBLEMS),
    "jwt_verifications": ("counter", "JWT signatures the workers checked (a token verified before is kept "
                          "until its exp, and not checked again).", None, ()),
    "config_reloads": ("counter", "SIGHUP reloads of --config, by outcome.", "outcome", RELOAD_OUTCOMES),
    "stream_ends": ("counter", "Streams ended, by the access log's reason (expired: its token's expiry came).",
                    "reason", STREAM_END_REASONS),
    **{name: ("worker", help_text, None, ()) for name, help_text in WORKER_GAUGES.items()},
    "pid": ("pid", "The block owner's process id (read by the exporter, not exported).", None, ()),
}
HISTOGRAMS = {
    "reader_lag_events": ("How many events behind the ring head a connection was at each write.",
                          "endpoint", ENDPOINTS, LAG_BUCKETS, 1),
    "heartbeat_jitter_seconds": ("How late the worker's loop handed each heartbeat to its stream: the loop's "
                                 "lateness alone (a client not reading counts in murgw_heartbeats_blocked_total).",
                                 None, ("",), JITTER_BUCKETS, MICRO),
    "loop_stall_seconds": (f"How late each worker's {PULSE_SECONDS:g} s stall pulse ran: "
                           "time its event loop went without a turn.", None, ("",), JITTER_BUCKETS, MICRO),
}


def _layout() -> tuple[dict, int]:
    offsets, word = {}, 0
    for name, (_kind, _help, _label, values) in COUNTERS.items():
        for value in values or ("",):
            offsets[(name, value)] = word
            word += 1
    for name, (_help, _label, values, buckets, _scale) in HISTOGRAMS.items():
        for value in values:
            offsets[(name, value)] = word
            word += len(buckets) + 2  # buckets, +Inf, sum (scaled to integers)
    return offsets, word


OFFSETS, WORDS = _layout()


def pids(blocks: CounterBlocks) -> list[tuple[str, int]]:
    """(process label, pid) of every block whose owner recorded its pid."""
    offset = OFFSETS[("pid", "")]
    return [(board.block_name(b), blocks.block(b)[offset]) for b in range(blocks.blocks)
            if blocks.block(b)[offset]]


class Counters:
    """One process's block: plain adds, no locks."""

    def __init__(self, blocks: CounterBlocks, index: int):
        self._blocks = blocks
        self.words = blocks.block(index)

    @classmethod
    def attach(cls, where, role: Role, worker: int = 0) -> Counters:
        """Attach to this process's block (gateway/common/board.py: an unknown role or worker is an
        error) and record its pid there for the exporter."""
        counters = cls(CounterBlocks.attach(where), board.block_index(role, worker))
        counters.words[OFFSETS[("pid", "")]] = os.getpid()
        return counters

    def add(self, name: str, n: int = 1, label: str = "") -> None:
        self.words[OFFSETS[(name, label)]] += n

    def sub(self, name: str, n: int = 1, label: str = "") -> None:
        self.words[OFFSETS[(name, label)]] -= n

    def set(self, name: str, value: int) -> None:
        self.words[OFFSETS[(name, "")]] = value

    def observe(self, name: str, value: float, label: str = "", times: int = 1) -> None:
        _help, _label, _values, buckets, scale = HISTOGRAMS[name]
        base = OFFSETS[(name, label)]
        # the first bucket whose bound is >= value (+Inf past the last): le semantics
        self.words[base + bisect_left(buckets, value)] += times
        self.words[base + len(buckets) + 1] += max(0, int(value * scale)) * times

    def places_by_worker(self) -> list[tuple[int, int, int]]:
        """Every worker's (open streams, places taken, --max-connections), read from the shared
        blocks: a place is taken by a request in progress (open streams included) or a
        connection waiting for its head (the accept balance, gateway/worker/balance.py). A worker
        not serving (not yet started, or retired: its block cleared) has no places."""
        streams = [OFFSETS[("connections_open", endpoint)] for endpoint in ENDPOINTS]
        requests, idle = OFFSETS[("worker_requests_open", "")], OFFSETS[(IDLE_GAUGE, "")]
        limit = OFFSETS[("worker_max_connections", "")]
        places = []
        for b in board.worker_blocks(self._blocks.blocks):
            words = self._blocks.block(b)
            places.append((sum(words[o] for o in streams), words[requests] + words[idle], words[limit]))
        return places

    def close(self) -> None:
        self._blocks.close()  # releases every view of the block, ours included


def create_blocks(name: str, workers: int) -> CounterBlocks:
    """The session's counter segment: a memfd, handed to each child by its handle."""
    return CounterBlocks.create(name, board.block_count(workers), WORDS, anonymous=True)


def retire_worker(blocks: CounterBlocks, worker: int) -> None:
    """Fold a dead worker's counters into the supervisor's block, then clear its block.

    Gauges (open connections, its own worker gauges) are not folded: the dead worker's connections
    are gone, and its replacement sets its own.
    """
    dead_block = board.block_index(Role.WORKER, worker)
    dead, keep = blocks.block(dead_block), blocks.block(board.SUPERVISOR_BLOCK)
    gauges = {OFFSETS[(n, v)] for n, (k, _h, _l, vals) in COUNTERS.items() if k in ("gauge", "pid", "worker")
              for v in vals or ("",)}
    for i in range(WORDS):
        if i not in gauges:
            keep[i] += dead[i]
    blocks.clear_block(dead_block)


def by_worker(blocks: CounterBlocks) -> list[tuple[str, dict[str, int]]]:
    """(process label, {WORKER_GAUGES name: value}) of every worker that recorded its pid."""
    pid = OFFSETS[("pid", "")]
    return [(board.block_name(b), {name: words[OFFSETS[(name, "")]] for name in WORKER_GAUGES})
            for b in board.worker_blocks(blocks.blocks) if (words := blocks.block(b))[pid]]


def totals(blocks: CounterBlocks) -> list[int]:
    """Every word summed over every block (gauges may be negative transiently: clamp)."""
    sums = [0] * WORDS
    for b in range(blocks.blocks):
        words = blocks.block(b)
        for i in range(WORDS):
            sums[i] += words[i]
    return [s if s < 1 << 63 else s - (1 << 64) for s in sums]
