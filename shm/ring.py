"""A single-writer, many-reader ring of byte records shared between processes.

The contract, in the manner of tokio's ``broadcast`` channel:

* **One writer, many readers.** One process at a time appends (``append``, ``reset``); any
  number of processes ``attach`` and ``read``. Readers never write the ring's words and
  never slow the writer down: the writer does not know they exist. A writer that attaches
  (a restarted one) carries on from what the segment shows.
* **Records are addressed by id.** Ids are the caller's u64 numbers (1 <= id < 2**63),
  strictly increasing within a session but free to jump: the ids skipped hold nothing. A
  record is (id, key, meta, data): ``key`` and ``meta`` are two u64 words the caller filters
  on without looking at ``data``; ``data`` is kept whole, never truncated (larger than
  ``max_record``: ``RecordTooLarge``, and nothing is written).
* **The ring forgets.** It keeps at most ``slots`` ids (id ``n`` lives in slot
  ``n % slots``) and at most ``arena_bytes`` of data, whichever runs out first. ``oldest``
  is the first id still readable and ``head`` the last one published; after each append
  ``oldest <= head`` and ``head - oldest < slots``. A reader that loads both while the
  writer runs loads ``oldest`` first and treats it as a hint: ``read`` has the last word.
  A reader that falls behind blocks nothing: the records it missed are gone, ``read``
  answers ``None`` for them, and the reader decides how to catch up (from ``oldest``, or
  near ``head``) and how to report the gap.
* **Never torn bytes.** If the writer overwrites a record while a reader is copying it, the
  reader notices and ``read`` answers ``None``, exactly as if it had come too late. A
  ``Record`` returned is always the one written under that id in the current session.
* **The epoch** counts sessions, from 1 at ``create``. ``reset`` empties the ring and bumps
  it: ids start again from 1 and a reader that keeps a cursor must notice the new epoch
  (the ids it holds mean nothing now). A read that straddles a reset answers ``None``.

How readers detect overwrites (seqlock plus arena reservation): each slot holds a sequence
word, ``2*id - 1`` while the writer fills it and ``2*id`` once complete. The writer first
publishes how far into the byte arena it is about to write (``reserve``, an absolute byte
position that only grows), then marks the slot odd, copies the bytes, writes the
descriptor, marks the slot even, and only then publishes ``head = id``. A reader checks
``seq == 2*id``, reads the descriptor and copies the bytes, then checks that ``seq`` and
the epoch are unchanged and that ``reserve - arena_bytes <= pos`` (no byte of the record
has been handed out again). ``reset`` zeroes every sequence word before bumping the epoch.

Why this is enough without locks or barriers: x86-64 keeps stores in program order and
loads in program order (TSO), so a reader that sees a store also sees every store the
writer made before it; ``check_platform`` refuses other machines. That holds only if each
control word is written by one aligned 8-byte store: a native ``memoryview.cast("Q")``
item assignment is one ``memcpy`` of 8 bytes (one ``mov``). ``struct.pack_into("<Q", ...)``
is never used here: standard-size packing writes byte by byte and a reader can see half
a word.

Layout (u64 words): a 64-byte header (magic/version, epoch, head, oldest, reserve, slots,
arena bytes, control words), ``slots`` descriptors of 64 bytes (seq, pos, len, key, meta),
``control_words`` words the ring never touches, then the arena. A record is contiguous in
the arena: one that does not fit before the end starts again at the beginning.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, NamedTuple

from shm.platform import check_platform
from shm.segment import Handle, Segment

MAGIC = int.from_bytes(b"murgwrn\x01", "little")  # the last byte is the layout version
_HEADER_WORDS = 8
_MAGIC, _EPOCH, _HEAD, _OLDEST, _RESERVE, _SLOTS, _ARENA, _CONTROL = range(_HEADER_WORDS)
_SLOT_WORDS = 8  # one 64-byte cache line a slot
_SEQ, _POS, _LEN, _KEY, _META = range(5)
_MAX_ID = (1 << 63) - 1  # 2 * id must fit the u64 sequence word
_MAX_U64 = (1 << 64) - 1


class RecordTooLarge(ValueError):
    pass


class Record(NamedTuple):
    id: int
    key: int
    meta: int
    data: bytes


class Ring:
    DEFAULT_SLOTS = 512
    DEFAULT_ARENA = 64 << 20

    def __init__(self, segment: Segment, *, owner: bool) -> None:
        """Map an initialised segment; use ``create`` or ``attach``."""
        with segment.buf[: _HEADER_WORDS * 8].cast("Q") as header:
            magic, slots, arena_bytes, control_words = (
                header[_MAGIC], header[_SLOTS], header[_ARENA], header[_CONTROL])
        if magic != MAGIC:
            raise ValueError(f"{segment.name}: not a murmur-gateway ring of this version "
                             f"(magic {magic:#x}, expected {MAGIC:#x})")
        expected = _segment_size(slots, arena_bytes, control_words)
        if segment.size != expected:
            raise ValueError(f"{segment.name}: {segment.size} bytes, its header says {expected}")
        self.name = segment.name
        self.slots = slots
        self.arena_bytes = arena_bytes
        self.max_record = arena_bytes // 4
        control_start = (_HEADER_WORDS + slots * _SLOT_WORDS) * 8
        arena_start = control_start + control_words * 8
        self._segment = segment
        self._owner = owner
        self._words = segment.view(0, control_start)
        self.control = segment.view(control_start, arena_start)
        self._arena = segment.view(arena_start, segment.size, "B")
        self._live: deque[tuple[int, int]] | None = None  # the writer's (id, pos), oldest first

    @classmethod
    def create(cls, name: str, *, control_words: int, slots: int = DEFAULT_SLOTS,
               arena_bytes: int = DEFAULT_ARENA, anonymous: bool = False) -> Ring:
        """A new, empty ring at epoch 1, owned by this process; ``anonymous``: in a memfd
        (``shm.segment``), attached by ``handle`` rather than by name. ``control_words`` has
        no default: the ring never touches them, so only its user knows how many it needs
        (the gateway's: gateway/common/board.py)."""
        check_platform()
        if slots < 1 or arena_bytes < 4 or control_words < 0:
            raise ValueError(f"bad ring geometry: {slots} slots, {arena_bytes} arena bytes, "
                             f"{control_words} control words")
        size = _segment_size(slots, arena_bytes, control_words)
        segment = (Segment.create_anonymous if anonymous else Segment.create)(name, size)
        try:
            with segment.buf[: _HEADER_WORDS * 8].cast("Q") as header:
                header[_SLOTS], header[_ARENA], header[_CONTROL] = slots, arena_bytes, control_words
                header[_EPOCH] = 1
                header[_MAGIC] = MAGIC  # last: an attacher never maps a half-written header
            return cls(segment, owner=True)
        except BaseException:
            segment.close()
            segment.unlink()
            raise

    @classmethod
    def attach(cls, where: str | Handle) -> Ring:
        check_platform()
        segment = Segment.attach(where)
        try:
            return cls(segment, owner=False)
        except BaseException:
            segment.close()
            raise

    @property
    def handle(self) -> Handle | None:
        """The creator's handle on an anonymous ring: pass it to a spawned child."""
        return self._segment.handle

    @property
    def epoch(self) -> int:
        return self._words[_EPOCH]

    @property
    def head(self) -> int:
        return self._words[_HEAD]

    @property
    def oldest(self) -> int:
        """The first id still readable (0 when empty); load it before ``head`` if you need both."""
        return self._words[_OLDEST]

    def append(self, id: int, key: int, meta: int, data: bytes) -> None:
        """Publish a record (writer only). ``id`` must be above ``head``."""
        size = len(data)
        if size > self.max_record:
            raise RecordTooLarge(f"record {id} holds {size} bytes; the ring takes at most "
                                 f"{self.max_record} (a quarter of its "
                                 f"{self.arena_bytes}-byte arena)")
        words = self._words
        if not words[_HEAD] < id <= _MAX_ID:
            raise ValueError(f"record id {id} must be above the head {words[_HEAD]} "
                             "and below 2**63")
        if not (0 <= key <= _MAX_U64 and 0 <= meta <= _MAX_U64):
            raise ValueError(f"key {key} and meta {meta} must be u64")
        live = self._live
        if live is None:
            live = self._live = self._recover_live()
        arena_bytes = self.arena_bytes
        pos = words[_RESERVE]
        offset = pos % arena_bytes
        if offset + size > arena_bytes:
            pos += arena_bytes - offset
            offset = 0
        reserve = pos + size
        words[_RESERVE] = reserve
        self._evict(live, id - self.slots, reserve - arena_bytes)
        slot = self._slot(id)
        words[slot + _SEQ] = 2 * id - 1
        self._arena[offset:offset + size] = data
        words[slot + _POS] = pos
        words[slot + _LEN] = size
        words[slot + _KEY] = key
        words[slot + _META] = meta
        words[slot + _SEQ] = 2 * id
        words[_HEAD] = id
        live.append((id, pos))
        if len(live) == 1:
            words[_OLDEST] = id

    def _slot(self, id: int) -> int:
        """The index in ``_words`` of the first word of id's slot."""
        return _HEADER_WORDS + (id % self.slots) * _SLOT_WORDS

    def _evict(self, live: deque[tuple[int, int]], last_lost_id: int, first_kept_pos: int) -> None:
        """Forget records whose slot the new id takes over or whose bytes it overwrites.

        Both happen oldest first, so the survivors are always the newest records. ``oldest``
        moves before the bytes are overwritten, and never past the published head: when
        nothing survives, ``append`` sets it to the new id after publishing it. So a reader
        that loads ``oldest`` and then ``head`` sees ``oldest <= head``.
        """
        evicted = False
        while live and (live[0][0] <= last_lost_id or live[0][1] < first_kept_pos):
            live.popleft()
            evicted = True
        if evicted and live:
            self._words[_OLDEST] = live[0][0]

    def _recover_live(self) -> deque[tuple[int, int]]:
        """The live records as the segment shows them, for a writer that attached or restarted."""
        words = self._words
        head, first_kept_pos = words[_HEAD], words[_RESERVE] - self.arena_bytes
        live: deque[tuple[int, int]] = deque()
        for id in range(max(1, head - self.slots + 1), head + 1):
            slot = self._slot(id)
            if words[slot + _SEQ] == 2 * id and words[slot + _POS] >= first_kept_pos:
                live.append((id, words[slot + _POS]))
        return live

    def reset(self) -> int:
        """Start a new session (writer only): the ring empties and the epoch moves on."""
        words = self._words
        for slot in range(_HEADER_WORDS, _HEADER_WORDS + self.slots * _SLOT_WORDS, _SLOT_WORDS):
            words[slot + _SEQ] = 0
        words[_HEAD] = 0
        words[_OLDEST] = 0
        epoch = words[_EPOCH] + 1
        words[_EPOCH] = epoch
        self._live = deque()
        return epoch

    def read(self, id: int, *, _race: Callable[[str], None] | None = None) -> Record | None:
        """The record ``id``, or None if it is not (or no longer) in the ring.

        ``_race`` is a test hook, called where a concurrent writer can overwrite the record
        under the reader: after the sequence word is checked ("sequence"), after the
        descriptor is read ("descriptor") and after the bytes are copied ("copied").
        """
        words = self._words
        epoch = words[_EPOCH]
        head = words[_HEAD]
        if id < 1 or not head - self.slots < id <= head:
            return None
        slot = self._slot(id)
        seq = words[slot + _SEQ]
        if seq != 2 * id:
            return None
        if _race:
            _race("sequence")
        pos, size = words[slot + _POS], words[slot + _LEN]
        key, meta = words[slot + _KEY], words[slot + _META]
        if _race:
            _race("descriptor")
        offset = pos % self.arena_bytes
        data = bytes(self._arena[offset:offset + size])
        if _race:
            _race("copied")
        if (words[slot + _SEQ] != seq or words[_RESERVE] - self.arena_bytes > pos
                or words[_EPOCH] != epoch):
            return None
        return Record(id, key, meta, data)

    def close(self) -> None:
        """Unmap the ring in this process; ``control`` and every view of it become unusable."""
        self._segment.close()

    def unlink(self) -> None:
        """Remove the segment's name (owner only); processes that mapped it keep their mapping."""
        if not self._owner:
            raise RuntimeError(f"{self.name}: only the process that created the ring unlinks it")
        self._segment.unlink()


def _segment_size(slots: int, arena_bytes: int, control_words: int) -> int:
    return (_HEADER_WORDS + slots * _SLOT_WORDS + control_words) * 8 + arena_bytes
