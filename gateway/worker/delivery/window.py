"""A worker's copy of the ring's recent events, and the byte joins its streams share.

The hub's pump copies each new ring record once into this 512-entry window; every open
stream then walks it from its own integer cursor. An idle stream costs a cursor, never a
buffer. Each `Entry` caches its SSE event joined with a few JSON-RPC request prefixes
(most watchers send the same id), and `batch` caches, until the head moves, every event
after one cursor joined for one prefix: watchers in step share one join per pass, so a
watcher's share of a pass is one write.

A replay reads a `Replay`, not the window: the window's entries up to the head when the request
was read, held by reference for as long as the stream still owes any of them (protocol/lag.py
states the rule). Every stream that opens between two copies shares one (`replay_view`): a
tuple of at most 512 references, the entries themselves shared with the window, and freed
when the last stream reading it has written its replay (or ended). The window then never needs
more than the ring's slots: live events never outrun the lag limit's 128 inside it. What views
keep alive after the window let their entries go is bounded by the lapped-replay budget
(lapped.py).

No write is larger than a piece (PIECE_BYTES, or one event where a single event is larger):
a batch stops at the first event that takes it past the bound, and the stream's cursor stops
there too (`Batch.last`). A replay of the whole buffer is then a few pieces, each written
when the one before has left (hub.py, catchup.py), never one write of the whole buffer.

Nothing here does I/O or counts a metric: a `Batch` only records how many streams took it
(`takers`), and the hub counts what `taken` answers once per pass.
"""

from __future__ import annotations

from sys import getsizeof

from gateway.common import records
from gateway.protocol import sse
from gateway.tuning import MAX_BATCHES, MAX_CACHED_JOINS, PIECE_BYTES


class Entry:
    """One ring event as this worker holds it, and the bytes it holds (`size`: itself, its
    forms and its cached joins, as sys.getsizeof counts them; lapped.py's budget reads it)."""

    __slots__ = ("id", "key", "meta", "full", "plain", "head", "joins", "size")

    def __init__(self, event_id: int, key: int, meta: int, data: bytes):
        self.id, self.key, self.meta = event_id, key, meta
        self.full, self.plain = full, plain = records.unpack(meta, data)
        self.head = sse.event_head(event_id)
        self.joins: dict[tuple[bytes, bool], bytes] = {}
        self.size = (getsizeof(self) + getsizeof(self.joins) + getsizeof(self.head) + getsizeof(full)
                     + (getsizeof(plain) if plain is not full else 0))

    def wire(self, prefix: bytes, plain: bool) -> bytes:
        """The whole SSE event for a connection whose JSON-RPC prefix is `prefix`."""
        cache_key = (prefix, plain)
        joined = self.joins.get(cache_key)
        if joined is None:
            joined = sse.join_event(self.head, prefix, self.plain if plain else self.full)
            if len(self.joins) < MAX_CACHED_JOINS:
                self.joins[cache_key] = joined
                self.size += getsizeof(joined)
        return joined


class Batch:
    """The events after one cursor up to `last` (at most a piece), joined for one request
    prefix, and how many streams took it since the window last answered `taken`."""

    __slots__ = ("body", "events", "lag", "last", "takers")

    def __init__(self, body: bytes, events: int, lag: int, last: int):
        self.body, self.events, self.lag, self.last, self.takers = body, events, lag, last, 0


class Replay:
    """The window's entries up to one head, as a replay opened at that head reads them."""

    __slots__ = ("head", "first", "entries")

    def __init__(self, head: int, first: int, entries: tuple[Entry | None, ...]):
        self.head, self.first, self.entries = head, first, entries

    def entry(self, event_id: int) -> Entry | None:
        index = event_id - self.first
        entry = self.entries[index] if 0 <= index < len(self.entries) else None
        return entry if entry is not None and entry.id == event_id else None


class Window:
    """Ring events by id, the head and oldest ids, and what the session's control words said
    at the last copy (`session_closed_at`, `closing`)."""

    def __init__(self, slots: int):
        self.slots = slots
        self.entries: list[Entry | None] = [None] * slots
        self.head = 0
        self.oldest = 0
        self.session_closed_at = 0  # the ring's SESSION_CLOSED word: head + 1 when the session ended
        self.closing = False  # the gateway drains: every stream ends now
        self.batches: dict[tuple[int, int, bytes, bool], Batch | None] = {}
        self.uncounted: list[Batch] = []  # batches past MAX_BATCHES: taken once, counted by the hub
        self._replay: Replay | None = None  # the view the openings since the last copy share

    def clear(self) -> None:
        """A new session: nothing of the old one is kept."""
        self.entries = [None] * self.slots
        self.head = self.oldest = 0
        self.batches.clear()
        self._replay = None

    def put(self, event_id: int, key: int, meta: int, data: bytes) -> Entry:
        entry = self.entries[event_id % self.slots] = Entry(event_id, key, meta, data)
        self._replay = None
        return entry

    def drop(self, event_id: int) -> None:
        """The ring overwrote the record before it was copied: a hole every stream crossing it
        accounts for."""
        self.entries[event_id % self.slots] = None
        self._replay = None

    def entry(self, event_id: int) -> Entry | None:
        entry = self.entries[event_id % self.slots]
        return entry if entry is not None and entry.id == event_id else None

    def replay_view(self) -> Replay:
        """The entries up to the head now, for a replay opened now: one tuple shared by every
        opening until the next copy moves the head."""
        view = self._replay
        if view is None or view.head != self.head:
            head, slots = self.head, self.slots
            split = (head + 1) % slots  # entries are held at id % slots: rotate to id order
            view = self._replay = Replay(head, head - slots + 1, (*self.entries[split:], *self.entries[:split]))
        return view

    def take_batch(self, cursor: int, end: int, prefix: bytes, plain: bool,
                   source: Replay | None = None) -> Batch | None:
        """The events after `cursor` up to `end` (the head, or where a replay ends), at most
        a piece, read from `source` (a replay's view) or the window, joined for a stream whose
        JSON-RPC prefix is `prefix`, counted as taken once; None when one is missing (the
        stream then walks them event by event and accounts for the hole). Cached until the
        head moves, so a thousand watchers in step share one join; ids are unique in a
        session, so a replay's view and the window answer the same bytes for the same key."""
        key = (cursor, end, prefix, plain)
        try:
            found = self.batches[key]
        except KeyError:
            found = self._join(cursor, end, prefix, plain, source or self)
            if len(self.batches) < MAX_BATCHES:
                self.batches[key] = found
            elif found is not None:
                self.uncounted.append(found)
        if found is not None:
            found.takers += 1
        return found

    def _join(self, cursor: int, end: int, prefix: bytes, plain: bool, source: Replay | Window) -> Batch | None:
        wires, size, last = [], 0, cursor
        for last in range(cursor + 1, end + 1):
            entry = source.entry(last)
            if entry is None:
                return None
            wire = entry.wire(prefix, plain)
            wires.append(wire)
            size += len(wire)
            if size >= PIECE_BYTES:
                break
        return Batch(b"".join(wires), len(wires), self.head - cursor, last)

    def taken(self) -> list[tuple[int, int, int]]:
        """(events, lag, takers) of every batch taken since the last call, each once: what
        the hub's metrics count of the watchers that shared it."""
        taken = [batch for batch in self.batches.values() if batch is not None and batch.takers]
        if self.uncounted:
            taken += self.uncounted
            self.uncounted = []
        counts = []
        for batch in taken:
            counts.append((batch.events, batch.lag, batch.takers))
            batch.takers = 0
        return counts
