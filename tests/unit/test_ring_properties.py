"""Property tests of the ring's contract: a reader never sees torn or misattributed bytes.

A model keeps what was written in the current session. Hypothesis interleaves appends (any
size up to the limit, so records wrap the arena; ids that step or jump), resets, a reader
that follows the ring, and a reader that pauses while the writer runs on: after checking a
slot's sequence word (the writer may then replace the descriptor), after reading the
descriptor (the writer may overwrite the bytes about to be copied) and after copying them.
One process plays both sides, so every interleaving is reproducible.
"""

import pytest
import os
import random
import uuid

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from shm import Ring

pytestmark = pytest.mark.unit

SLOTS = 8
ARENA = 1024
MAX_RECORD = ARENA // 4

id_steps = st.one_of(st.integers(1, 3), st.integers(SLOTS - 1, 3 * SLOTS))
record_sizes = st.one_of(st.integers(0, 16), st.integers(MAX_RECORD - 40, MAX_RECORD))
appends = st.lists(st.tuples(id_steps, record_sizes), max_size=12)
STAGES = ("sequence", "descriptor", "copied")  # where Ring.read lets the writer run


def payload(epoch: int, id: int, size: int) -> bytes:
    return random.Random(f"{epoch}/{id}").randbytes(size)


class RingMachine(RuleBasedStateMachine):
    @initialize()
    def create(self):
        self.ring = Ring.create(f"murgw-test-{os.getpid()}-{uuid.uuid4().hex[:12]}-prop",
                                slots=SLOTS, arena_bytes=ARENA, control_words=0)
        self.written: dict[int, bytes] = {}  # this session's records, by id
        self.cursor = 0  # the following reader's last id
        self.followed: list[int] = []

    def teardown(self):
        if hasattr(self, "ring"):
            self.ring.close()
            self.ring.unlink()

    def append(self, step: int, size: int) -> None:
        id = self.ring.head + step
        data = payload(self.ring.epoch, id, size)
        self.ring.append(id, key=id * 3, meta=size, data=data)
        self.written[id] = data

    def readable(self) -> dict[int, bytes]:
        return {id: data for id, data in self.written.items() if id >= self.ring.oldest}

    @rule(batch=appends)
    def write(self, batch):
        for step, size in batch:
            self.append(step, size)

    @rule()
    def reset(self):
        epoch = self.ring.epoch
        assert self.ring.reset() == epoch + 1
        self.written.clear()
        self.cursor = 0
        self.followed.clear()

    @rule()
    def follow(self):
        """A reader catching up from its cursor: ascending ids, exact bytes, gaps only where lost."""
        for id in range(max(self.cursor + 1, self.ring.head - 4 * SLOTS), self.ring.head + 1):
            record = self.ring.read(id)
            if record is not None:
                assert record.id == id and record.data == self.written[id]
                assert record.key == id * 3 and record.meta == len(record.data)
                assert not self.followed or self.followed[-1] < id
                self.followed.append(id)
            else:
                assert id not in self.readable()
        self.cursor = self.ring.head

    @precondition(lambda self: self.readable())
    @rule(data=st.data(), writes=st.fixed_dictionaries(dict.fromkeys(STAGES, appends)),
          reset_at=st.sampled_from((None, *STAGES)))
    def paused_read(self, data, writes, reset_at):
        """A reader the writer overtakes at any of the three points of a read."""
        before = self.readable()
        id = data.draw(st.sampled_from(sorted(before)))
        before = before[id]
        epoch = self.ring.epoch

        def writer_runs(stage):
            if stage == reset_at:
                self.reset()
            for step, size in writes[stage]:
                self.append(step, size)

        record = self.ring.read(id, _race=writer_runs)
        if record is not None:  # never torn: exactly what was readable when the read began
            assert record == (id, id * 3, len(before), before)
        if self.ring.epoch != epoch:
            assert record is None
        elif id in self.readable():  # nothing overwrote it: a pause alone loses nothing
            assert record is not None

    @invariant()
    def head_and_oldest_bound_the_readable_ids(self):
        ring = self.ring
        if not self.written:
            assert (ring.head, ring.oldest) == (0, 0)
            return
        assert ring.head == max(self.written)
        assert 1 <= ring.oldest <= ring.head and ring.head - ring.oldest < SLOTS
        assert ring.oldest in self.written
        readable = self.readable()
        for id in range(max(1, ring.head - 4 * SLOTS), ring.head + 2):
            record = ring.read(id)
            assert (record.data if record else None) == readable.get(id)


RingMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)
test_ring_contract = RingMachine.TestCase
