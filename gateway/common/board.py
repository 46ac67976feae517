"""The board: every word the gateway's processes share, where it lies and who writes it.

Two shared segments carry them, both memfds the supervisor creates (shm.segment):

The ring's control words (``Board``, over ``Ring.control``) are how the sequencer, the workers
and the supervisor signal each other. Each is one aligned u64, written by exactly one role:
- ``CLOSING`` (supervisor): the gateway is draining; workers end every stream now.
- ``SESSION_CLOSED`` (sequencer): the capsule's stream ended; it holds the head id at that
  moment plus one, so a watcher delivers everything up to it, then ``capsule-closed``.
- ``SEQUENCER_PID`` (sequencer): set once it serves control calls; ``/readyz`` reads it.
- ``UPSTREAM_CONNECTED`` (sequencer): 1 while the upstream (or the embedded capsule) is live.
- ``UPSTREAM_THREADED`` (sequencer, upstream mode): 1 when the upstream's connection-ack said
  `conversationMode` `threaded`, so every worker's connection-ack says what the upstream's says.
- ``TLS_EXPIRY`` (supervisor, with TLS): --certfile's notAfter, in Unix seconds, for the
  exporter's murgw_tls_certificate_expiry_timestamp_seconds.
- ``CONFIG_GENERATION`` (sequencer): bumped at each applied reload (SIGHUP); a worker that
  sees it move asks the sequencer for the reloadable settings (worker/reload.py).
- ``ARMED + i`` (worker i sets, sequencer clears): worker i is idle and wants one wake-up
  byte on its socket at the next event. Under load the flag stays clear and the sequencer
  makes no syscall for that worker.
- ``LOOP_BEAT + i`` (worker i): bumped each time worker i's event loop turns a pulse
  (``gateway.common.stall``) and as its hub writes (``gateway.worker.delivery.hub``); the supervisor
  replaces a worker whose word stands still, and its siblings' accept balance stops waiting for
  its room (``gateway.worker.balance``).
The ring is created with ``CONTROL_WORDS`` of them and ``RING_SLOTS`` slots.

The counter blocks (``shm.CounterBlocks``; what each word of a block counts is
gateway/common/metrics.py's) are one block per process, so every block has one writer and an update
is a plain add: block 0 the sequencer's, 1 the supervisor's (with the retired totals of
replaced workers), 2.. the workers' by slot (``block_index``). The exporter only reads.

The numbers are tied here, at import: a change that breaks one of these relations stops the
gateway before anything starts.
"""

from __future__ import annotations

import enum

from gateway.protocol.lag import LAG_LIMIT
from gateway.tuning import COALESCE_MAX_EVENTS

RING_SLOTS = 512  # the events the ring (and each worker's window) keeps
MAX_WORKERS = 56

CLOSING = 0
SESSION_CLOSED = 1
SEQUENCER_PID = 2
UPSTREAM_CONNECTED = 3
UPSTREAM_THREADED = 4
TLS_EXPIRY = 6
CONFIG_GENERATION = 7
ARMED = 8
LOOP_BEAT = ARMED + MAX_WORKERS
CONTROL_WORDS = LOOP_BEAT + MAX_WORKERS  # every word above; a ring with fewer: Board refuses it
SINGLE_WORDS = (CLOSING, SESSION_CLOSED, SEQUENCER_PID, UPSTREAM_CONNECTED, UPSTREAM_THREADED,
                TLS_EXPIRY, CONFIG_GENERATION)


class Role(enum.Enum):
    """The processes that own a counter block."""

    SEQUENCER = "sequencer"
    SUPERVISOR = "supervisor"
    WORKER = "worker"


SEQUENCER_BLOCK, SUPERVISOR_BLOCK, FIRST_WORKER_BLOCK = 0, 1, 2


def _require(holds: bool, why: str) -> None:
    """An import-time check that survives ``python -O`` (a plain assert would not)."""
    if not holds:
        raise AssertionError(f"gateway/common/board.py: {why}")


_require(LAG_LIMIT < RING_SLOTS, f"the lag limit ({LAG_LIMIT}) must be below the ring's slots "
         f"({RING_SLOTS}): a stream skipped to head - limit must find those events still there")
_require(COALESCE_MAX_EVENTS < LAG_LIMIT, f"COALESCE_MAX_EVENTS ({COALESCE_MAX_EVENTS}) must be below "
         f"the lag limit ({LAG_LIMIT}): a coalescing wait must not carry a stream into lag")
_require(len(set(SINGLE_WORDS)) == len(SINGLE_WORDS) and max(SINGLE_WORDS) < ARMED,
         "each single control word has a place of its own, below the workers' words")


def block_index(role: Role, worker: int = 0) -> int:
    """The counter block `role` (worker `worker`) writes; anything else is an error."""
    role = Role(role)
    if role is Role.SEQUENCER:
        return SEQUENCER_BLOCK
    if role is Role.SUPERVISOR:
        return SUPERVISOR_BLOCK
    if not 0 <= worker < MAX_WORKERS:
        raise ValueError(f"no counter block for worker {worker}: workers are 0 to {MAX_WORKERS - 1}")
    return FIRST_WORKER_BLOCK + worker


def block_count(workers: int) -> int:
    """How many blocks a gateway of `workers` workers has."""
    return FIRST_WORKER_BLOCK + workers


def worker_blocks(blocks: int) -> range:
    """The workers' blocks among `blocks`, worker 0's first."""
    return range(FIRST_WORKER_BLOCK, blocks)


def block_name(index: int) -> str:
    """The `process` label of a block's owner."""
    return {SEQUENCER_BLOCK: Role.SEQUENCER.value, SUPERVISOR_BLOCK: Role.SUPERVISOR.value}.get(
        index, f"{Role.WORKER.value}-{index - FIRST_WORKER_BLOCK}")


class _Word:
    """One named control word of a ``Board``, read as `kind` (int, or bool for a flag)."""

    def __init__(self, index: int, kind: type = int):
        self.index, self.kind = index, kind

    def __get__(self, shared: Board | None, owner: type | None = None):
        return self if shared is None else self.kind(shared.words[self.index])

    def __set__(self, shared: Board, value: int) -> None:
        shared.words[self.index] = int(value)


class Board:
    """Named reads and writes of the ring's control words (each word's one writer: above)."""

    __slots__ = ("words",)

    closing = _Word(CLOSING, bool)
    session_closed = _Word(SESSION_CLOSED)  # 0 while the session lasts
    sequencer_pid = _Word(SEQUENCER_PID)
    upstream_connected = _Word(UPSTREAM_CONNECTED, bool)
    upstream_threaded = _Word(UPSTREAM_THREADED, bool)
    tls_expiry = _Word(TLS_EXPIRY)  # 0 without TLS
    config_generation = _Word(CONFIG_GENERATION)

    def __init__(self, words: memoryview):
        if len(words) < CONTROL_WORDS:
            raise ValueError(f"the ring has {len(words)} control words; the board needs {CONTROL_WORDS}")
        self.words = words

    def arm(self, worker: int) -> None:
        """Worker `worker` sleeps: one wake-up byte at the next event, please."""
        self.words[ARMED + worker] = 1

    def disarm(self, worker: int) -> None:
        self.words[ARMED + worker] = 0

    def take_armed(self, worker: int) -> bool:
        """The sequencer's side: whether `worker` was armed, clearing the flag."""
        if self.words[ARMED + worker]:
            self.words[ARMED + worker] = 0
            return True
        return False

    def beat(self, worker: int) -> None:
        """Worker `worker`'s loop turned, or it wrote: its beat word moves (gateway/common/stall.py)."""
        self.words[LOOP_BEAT + worker] += 1

    def beats(self, worker: int) -> int:
        return self.words[LOOP_BEAT + worker]
