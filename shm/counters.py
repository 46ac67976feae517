"""Per-process metric counters in a shared segment, summed by the exporter.

Each counting process owns one block of ``words`` u64 words and is the only process that
writes it, with plain ``block[i] += n``: no lock is needed because no two processes write
the same word, and an aligned 8-byte store is never seen half done. The exporter attaches
and reads every block. Blocks start on 64-byte boundaries so two processes never write the
same cache line. A block keeps the counts of a process that died until ``clear_block``
zeroes it for the process that takes its place.
"""

from __future__ import annotations

from shm.segment import Handle, Segment

MAGIC = int.from_bytes(b"murgwct\x01", "little")  # the last byte is the layout version
_HEADER_WORDS = 8
_MAGIC, _BLOCKS, _WORDS = range(3)


class CounterBlocks:
    def __init__(self, segment: Segment) -> None:
        """Map an initialised segment; use ``create`` or ``attach``."""
        with segment.buf[: _HEADER_WORDS * 8].cast("Q") as header:
            magic, blocks, words = header[_MAGIC], header[_BLOCKS], header[_WORDS]
        if magic != MAGIC:
            raise ValueError(f"{segment.name}: not a murmur-gateway counter segment "
                             "of this version")
        self.name = segment.name
        self.blocks = blocks
        self.words = words
        self._segment = segment
        self._stride = _stride(words)
        self._views = [segment.view(start, start + words * 8) for start in self._starts()]

    @classmethod
    def create(cls, name: str, blocks: int, words: int, *, anonymous: bool = False) -> CounterBlocks:
        """``blocks`` zeroed blocks of ``words`` counters each (``anonymous``: in a memfd)."""
        if blocks < 1 or words < 1:
            raise ValueError(f"bad counter geometry: {blocks} blocks of {words} words")
        size = (_HEADER_WORDS + blocks * _stride(words)) * 8
        segment = (Segment.create_anonymous if anonymous else Segment.create)(name, size)
        try:
            with segment.buf[: _HEADER_WORDS * 8].cast("Q") as header:
                header[_BLOCKS], header[_WORDS] = blocks, words
                header[_MAGIC] = MAGIC
            return cls(segment)
        except BaseException:
            segment.close()
            segment.unlink()
            raise

    @classmethod
    def attach(cls, where: str | Handle) -> CounterBlocks:
        segment = Segment.attach(where)
        try:
            return cls(segment)
        except BaseException:
            segment.close()
            raise

    def block(self, i: int) -> memoryview:
        """Block ``i``: ``words`` u64 counters, written only by the process that owns it."""
        return self._views[i]

    @property
    def handle(self) -> Handle | None:
        """The creator's handle on an anonymous segment: pass it to a spawned child."""
        return self._segment.handle

    def clear_block(self, i: int) -> None:
        start = self._starts()[i]
        self._segment.buf[start:start + self.words * 8] = bytes(self.words * 8)

    def _starts(self) -> range:
        """Each block's first byte in the segment."""
        stride_bytes = self._stride * 8
        first = _HEADER_WORDS * 8
        return range(first, first + self.blocks * stride_bytes, stride_bytes)

    def close(self) -> None:
        self._segment.close()

    def unlink(self) -> None:
        self._segment.unlink()


def _stride(words: int) -> int:
    """Words from one block's start to the next: ``words`` rounded up to a cache line."""
    return -(-words // 8) * 8
