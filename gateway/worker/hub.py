"""A worker's view of the ring: one pump, one window, one heartbeat wheel for every stream.

The pump copies each new ring record once into a local 512-entry window when the sequencer
wakes the worker; every open stream then walks that window from its own integer cursor.
An idle stream costs a cursor, never a buffer. Each entry caches the event's bytes joined
with a few JSON-RPC request ids (most watchers send the same id), and each pass caches the
joined batch per (cursor, id) (`batch`): watchers in step share one join per pass, so a
watcher's share of a pass is its `transport.write`.

Wake-up protocol (control_words.ARMED): before sleeping the worker sets its armed word and
re-reads the head; the sequencer sends one byte only to armed workers. x86-64 may reorder a
store before a later load (store buffering), so an armed flag and a head published at the
same instant can miss each other: a slow poll (`POLL_SECONDS`) closes that window.

Heartbeats: each stream is due at open + k x interval, never reset by events; one timer
serves the earliest due stream (at most once per HEARTBEAT_TICK_SECONDS), and the delay
past the due time is the jitter metric.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import socket
import time
from typing import TYPE_CHECKING

from gateway import control_words, records
from gateway.metrics import Counters
from gateway.protocol.activation import WATCH_SESSION
from gateway.protocol import sse
from shm import Ring

if TYPE_CHECKING:
    from gateway.worker.streams import Stream

POLL_SECONDS = 0.05
# With many streams open, a wake-up runs the pump this much later, so events written meanwhile
# go out in the same batched send: at 100 events/s, 2 ms halves the sends for +1 ms latency.
# With few streams, sends are cheap and the pump runs at once.
COALESCE_SECONDS = 0.002
COALESCE_MIN_STREAMS = 64
MAX_CACHED_JOINS = 4
# The heartbeat timer fires at most once per tick and writes every heartbeat then due:
# streams open at scattered instants, and one timer per due time (thousands a second with
# 10,000 watchers) cost most of an idle worker. A heartbeat is late by under a tick.
HEARTBEAT_TICK_SECONDS = 0.01
MAX_BATCHES = 256  # joined batches kept per head (distinct cursor x request id)


class Entry:
    """One ring event as this worker holds it."""

    __slots__ = ("id", "key", "meta", "full", "plain", "head", "joins")

    def __init__(self, event_id: int, key: int, meta: int, data: bytes):
        self.id, self.key, self.meta = event_id, key, meta
        self.full, self.plain = records.unpack(meta, data)
        self.head = sse.event_head(event_id)
        self.joins: dict[tuple[bytes, bool], bytes] = {}

    def wire(self, prefix: bytes, plain: bool) -> bytes:
        """The whole SSE event for a connection whose JSON-RPC prefix is `prefix`."""
        cache_key = (prefix, plain)
        joined = self.joins.get(cache_key)
        if joined is None:
            joined = b"".join((self.head, prefix, self.plain if plain else self.full, sse.EVENT_TAIL))
            if len(self.joins) < MAX_CACHED_JOINS:
                self.joins[cache_key] = joined
        return joined


class Batch:
    """Every event after one cursor up to the head, joined for one request id, and how many
    watchers took it this pass: their metrics are counted once per batch (`Hub._count_batches`)."""

    __slots__ = ("body", "events", "lag", "takers")

    def __init__(self, body: bytes, events: int, lag: int):
        self.body, self.events, self.lag, self.takers = body, events, lag, 0


class Hub:
    def __init__(self, ring: Ring, wake_sock: socket.socket, index: int, interval: float,
                 counters: Counters):
        self.ring = ring
        self.counters = counters
        self.wake_sock = wake_sock
        self.index = index
        self.interval = interval
        self.slots = ring.slots
        self.window: list[Entry | None] = [None] * self.slots
        self.head = 0
        self.oldest = 0
        self.epoch = ring.epoch
        self.session_closed_at = 0
        self.closing = False
        self.open_streams = 0
        self.watchers: set[Stream] = set()
        self.task_streams: dict[int, set[Stream]] = {}
        self._due: list[tuple[float, int, Stream]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._poll: asyncio.TimerHandle | None = None
        self._pending_sync: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batches: dict[tuple[int, bytes, bool], Batch | None] = {}

    # --- the pump ---

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.wake_sock.setblocking(False)
        self._loop.add_reader(self.wake_sock.fileno(), self._on_wake)
        self.head = max(0, self.ring.head - self.slots)
        self.sync()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.wake_sock.fileno())
        for handle in (self._timer, self._poll, self._pending_sync):
            if handle is not None:
                handle.cancel()

    def _on_wake(self) -> None:
        try:
            while self.wake_sock.recv(64):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._schedule_sync()

    def _schedule_sync(self) -> None:
        if self._pending_sync is None:
            delay = COALESCE_SECONDS if self.open_streams >= COALESCE_MIN_STREAMS else 0.0
            self._pending_sync = self._loop.call_later(delay, self._coalesced_sync)

    def _coalesced_sync(self) -> None:
        self._pending_sync = None
        self.sync()

    def _on_poll(self) -> None:
        self._poll = None
        self.sync()

    def sync(self) -> None:
        """Copy every new record into the window, then wake the streams it concerns."""
        ring, words = self.ring, self.ring.control
        words[control_words.ARMED + self.index] = 0
        if ring.epoch != self.epoch:
            self._new_session(ring.epoch)
        target = ring.head
        keys: set[int] = set()
        advanced = target > self.head
        if advanced:
            first = max(self.head + 1, target - self.slots + 1)
            for event_id in range(first, target + 1):
                record = ring.read(event_id)
                entry = None if record is None else Entry(event_id, record.key, record.meta, record.data)
                self.window[event_id % self.slots] = entry
                if entry is not None:
                    keys.add(entry.key)
            self._count_batches()
            self._batches.clear()
            self.head = target
        self.oldest = ring.oldest
        closed_at = words[control_words.SESSION_CLOSED]
        closing = self.closing or bool(words[control_words.CLOSING])
        if advanced or closed_at != self.session_closed_at or closing != self.closing:
            self.session_closed_at, self.closing = closed_at, closing
            self._notify(keys)  # only when something changed: an idle poll wakes no stream
        words[control_words.ARMED + self.index] = 1
        if ring.head != self.head or ring.epoch != self.epoch:
            self._schedule_sync()  # written while we copied: the next batch
        elif self._poll is None:
            self._poll = self._loop.call_later(POLL_SECONDS, self._on_poll)

    def _new_session(self, epoch: int) -> None:
        self.window = [None] * self.slots
        self.head = self.oldest = 0
        self.epoch = epoch
        for stream in self.all_streams():
            if stream.session_changed():
                self.counters.add("sends", label=stream.endpoint)

    def _notify(self, keys: set[int]) -> None:
        everyone = self.closing or self.session_closed_at
        sends = 0
        for stream in self.watchers:
            sends += stream.wake()
        if sends:
            self.counters.add("sends", sends, WATCH_SESSION)
        for key, streams in self.task_streams.items():
            if everyone or key in keys:
                for stream in streams:
                    if stream.wake():
                        self.counters.add("sends", label=stream.endpoint)
            else:
                for stream in streams:
                    stream.skip_idle(self.head)
        self._count_batches()

    def _count_batches(self) -> None:
        """The metrics of every watcher that took a batch since the last count."""
        for batch in self._batches.values():
            if batch is not None and batch.takers:
                self._count(batch, batch.takers)
                batch.takers = 0

    def _count(self, batch: Batch, takers: int) -> None:
        self.counters.add("events_delivered", batch.events * takers, WATCH_SESSION)
        self.counters.observe("reader_lag_events", batch.lag, WATCH_SESSION, takers)

    def entry(self, event_id: int) -> Entry | None:
        entry = self.window[event_id % self.slots]
        return entry if entry is not None and entry.id == event_id else None

    def batch(self, cursor: int, prefix: bytes, plain: bool) -> Batch | None:
        """Every event after `cursor` up to the head, joined for a watcher whose JSON-RPC
        prefix is `prefix`; None when one is missing from the window (the caller then walks
        it event by event and accounts for the hole). Cached until the head moves, so a
        thousand watchers in step share one join."""
        key = (cursor, prefix, plain)
        try:
            return self._batches[key]
        except KeyError:
            pass
        wires = []
        for event_id in range(cursor + 1, self.head + 1):
            entry = self.entry(event_id)
            if entry is None:
                wires = None
                break
            wires.append(entry.wire(prefix, plain))
        found = None if wires is None else Batch(b"".join(wires), len(wires), self.head - cursor)
        if len(self._batches) < MAX_BATCHES:
            self._batches[key] = found
        elif found is not None:  # not kept, so not counted later: its one taker counts now
            self._count(found, 1)
        return found

    @property
    def next_id(self) -> int:
        return self.head + 1

    # --- streams ---

    def all_streams(self) -> list[Stream]:
        return list(self.watchers) + [s for group in self.task_streams.values() for s in group]

    def add(self, stream: Stream, task_key: int | None) -> None:
        self.open_streams += 1
        if task_key is None:
            self.watchers.add(stream)
        else:
            self.task_streams.setdefault(task_key, set()).add(stream)
        self.schedule_heartbeat(stream, time.monotonic() + self.interval)

    def remove(self, stream: Stream, task_key: int | None) -> None:
        self.open_streams -= 1
        if task_key is None:
            self.watchers.discard(stream)
        else:
            group = self.task_streams.get(task_key)
            if group is not None:
                group.discard(stream)
                if not group:
                    del self.task_streams[task_key]

    def close_all(self) -> None:
        self.closing = True
        for stream in self.all_streams():
            stream.poke()

    # --- the heartbeat wheel ---

    def schedule_heartbeat(self, stream: Stream, due: float) -> None:
        heapq.heappush(self._due, (due, next(self._order), stream))
        if self._due[0][2] is stream:
            self._arm_timer()

    def _arm_timer(self, floor: float = 0.0) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        if self._due:
            delay = max(floor, self._due[0][0] - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire_heartbeats)

    def _fire_heartbeats(self) -> None:
        self._timer = None
        now = time.monotonic()
        while self._due and self._due[0][0] <= now:
            due, _, stream = heapq.heappop(self._due)
            if stream.open:
                if stream.heartbeat_due(due):
                    self.counters.add("sends", label=stream.endpoint)
                heapq.heappush(self._due, (due + self.interval, next(self._order), stream))
        self._arm_timer(HEARTBEAT_TICK_SECONDS)
