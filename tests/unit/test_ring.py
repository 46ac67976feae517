"""Unit tests of the shared-memory ring, its segment and the counter blocks (shm/)."""

import os
import pathlib
import uuid

import pytest

from shm import CounterBlocks, Record, RecordTooLarge, Ring, check_platform
from shm.segment import SHM_DIR, Segment

pytestmark = pytest.mark.unit

CONTROL_WORDS = 64  # what these rings reserve for their users (the ring never touches them)


def unique_name(kind: str) -> str:
    return f"murgw-test-{os.getpid()}-{uuid.uuid4().hex[:12]}-{kind}"


@pytest.fixture
def ring_name():
    name = unique_name("ring")
    yield name
    pathlib.Path(SHM_DIR, name).unlink(missing_ok=True)


@pytest.fixture
def ring(ring_name):
    ring = Ring.create(ring_name, control_words=CONTROL_WORDS)
    try:
        yield ring
    finally:
        ring.close()
        ring.unlink()


def test_create_attach_close_unlink_leaves_nothing_in_dev_shm(ring_name):
    ring = Ring.create(ring_name, control_words=CONTROL_WORDS)
    reader = Ring.attach(ring_name)
    ring.close()
    reader.close()
    reader.close()  # idempotent
    ring.unlink()
    ring.unlink()  # idempotent
    assert not os.path.exists(os.path.join(SHM_DIR, ring_name))


def test_a_second_create_of_the_same_name_fails(ring):
    with pytest.raises(FileExistsError):
        Ring.create(ring.name, control_words=CONTROL_WORDS)


def test_attach_rejects_a_segment_that_is_not_a_ring(ring_name):
    segment = Segment.create(ring_name, 4096)
    try:
        with pytest.raises(ValueError, match="not a murmur-gateway ring"):
            Ring.attach(ring_name)
    finally:
        segment.close()
        segment.unlink()


def test_only_the_owner_unlinks(ring):
    reader = Ring.attach(ring.name)
    try:
        with pytest.raises(RuntimeError, match="only the process that created"):
            reader.unlink()
    finally:
        reader.close()


def test_closed_ring_views_cannot_touch_the_memory(ring_name):
    ring = Ring.create(ring_name, control_words=CONTROL_WORDS)
    control = ring.control
    ring.close()
    ring.unlink()
    with pytest.raises(ValueError):
        control[0] = 1


def test_an_empty_ring(ring):
    assert (ring.epoch, ring.head, ring.oldest) == (1, 0, 0)
    assert ring.max_record == 16 << 20
    assert ring.read(1) is None
    assert ring.read(0) is None


def test_append_then_read_in_another_mapping(ring):
    ring.append(1, key=7, meta=0x1FF, data=b"id: 1\ndata: {}\n\n")
    ring.append(2, key=8, meta=0, data=b"")
    reader = Ring.attach(ring.name)
    try:
        assert (reader.slots, reader.arena_bytes, reader.epoch) == (512, 64 << 20, 1)
        assert reader.read(1) == Record(1, 7, 0x1FF, b"id: 1\ndata: {}\n\n")
        assert reader.read(2) == Record(2, 8, 0, b"")
        assert reader.read(3) is None
        assert (reader.head, reader.oldest) == (2, 1)
    finally:
        reader.close()


def test_ids_must_grow(ring):
    ring.append(5, 0, 0, b"x")
    for stale in (5, 4, 0):
        with pytest.raises(ValueError, match="above the head 5"):
            ring.append(stale, 0, 0, b"y")
    assert ring.read(5).data == b"x"


def test_the_slots_keep_the_last_512_ids(ring):
    for id in range(1, 601):
        ring.append(id, id, 0, id.to_bytes(4, "little"))
    assert (ring.head, ring.oldest) == (600, 89)
    assert ring.read(88) is None
    assert ring.read(89) == Record(89, 89, 0, (89).to_bytes(4, "little"))
    assert ring.read(600).key == 600


def test_large_records_evict_from_the_arena_before_their_slot_is_reused(ring_name):
    ring = Ring.create(ring_name, arena_bytes=1 << 20, control_words=CONTROL_WORDS)
    try:
        big = 200 << 10  # five fit in 1 MiB, never six
        for id in range(1, 11):
            ring.append(id, 0, 0, bytes([id]) * big)
            assert ring.head - ring.oldest + 1 <= 5
        assert ring.oldest == 6  # 6..10 took the bytes of 1..5, long before their slots
        assert ring.read(ring.oldest - 1) is None
        for id in range(ring.oldest, 11):
            assert ring.read(id).data == bytes([id]) * big
    finally:
        ring.close()
        ring.unlink()


def test_a_record_over_a_quarter_of_the_arena_is_refused_whole(ring_name):
    ring = Ring.create(ring_name, arena_bytes=1 << 20, control_words=CONTROL_WORDS)
    try:
        ring.append(1, 0, 0, b"a")
        with pytest.raises(RecordTooLarge, match=r"record 2 holds 262145 bytes; .* at most 262144"):
            ring.append(2, 0, 0, bytes(262145))
        assert (ring.head, ring.oldest) == (1, 1)
        assert ring.read(2) is None
        ring.append(2, 0, 0, bytes(262144))
        assert len(ring.read(2).data) == 262144
    finally:
        ring.close()
        ring.unlink()


def test_reset_starts_a_new_empty_session(ring):
    for id in range(1, 4):
        ring.append(id, 0, 0, b"old")
    reader = Ring.attach(ring.name)
    try:
        assert ring.reset() == 2
        assert (reader.epoch, reader.head, reader.oldest) == (2, 0, 0)
        assert reader.read(1) is None
        ring.append(1, 0, 0, b"new")
        ring.append(3, 0, 0, b"new")
        assert reader.read(1).data == b"new"
        assert reader.read(2) is None  # skipped in this session: the old record must not show
        assert (reader.head, reader.oldest) == (3, 1)
    finally:
        reader.close()


def test_a_slot_taken_over_while_a_reader_reads_it_gives_none(ring):
    ring.append(1, 3, 0, b"first")

    def writer_takes_the_slot(stage):
        if stage == "sequence":
            ring.append(513, 9, 0, b"later")  # 513 % 512 == 1: the descriptor is now 513's

    assert ring.read(1, _race=writer_takes_the_slot) is None
    assert ring.read(513) == Record(513, 9, 0, b"later")


def test_a_read_that_straddles_a_reset_gives_none_even_for_the_same_id(ring):
    ring.append(1, 0, 0, b"session 1")
    for stage in ("sequence", "descriptor", "copied"):

        def new_session_rewrites_id_1(at):
            if at == stage:  # noqa: B023 - called within this iteration of the loop
                ring.reset()
                ring.append(1, 0, 0, b"session " + str(ring.epoch).encode())

        assert ring.read(1, _race=new_session_rewrites_id_1) is None
    assert ring.read(1).data == b"session 4"


def test_ids_may_jump_and_the_skipped_ids_hold_nothing(ring):
    ring.append(1, 0, 0, b"one")
    ring.append(3, 0, 0, b"three")
    ring.append(515, 0, 0, b"slot of 3")  # 515 % 512 == 3
    assert ring.read(2) is None
    assert ring.read(3) is None
    assert (ring.head, ring.oldest) == (515, 515)
    ring.append(10_000, 0, 0, b"far")
    assert (ring.head, ring.oldest) == (10_000, 10_000)
    assert ring.read(515) is None
    assert ring.read(10_000).data == b"far"


def test_a_16_mib_record_round_trips(ring):
    data = os.urandom(16 << 20)
    ring.append(1, 0, 0, data)
    reader = Ring.attach(ring.name)
    try:
        assert reader.read(1).data == data
    finally:
        reader.close()


def test_a_writer_that_attaches_continues_the_ring(ring):
    for id in range(1, 4):
        ring.append(id, 0, 0, b"r")
    writer = Ring.attach(ring.name)
    try:
        for id in range(4, 600):
            writer.append(id, 0, 0, b"w")
        assert (ring.head, ring.oldest) == (599, 88)
        assert ring.read(88).data == b"w"
    finally:
        writer.close()


def test_control_words_are_zeroed_shared_and_untouched_by_the_ring(ring):
    reader = Ring.attach(ring.name)
    try:
        assert len(reader.control) == 64 and not any(reader.control)
        ring.control[63] = 2**64 - 1
        ring.append(1, 0, 0, b"x")
        ring.reset()
        assert reader.control[63] == 2**64 - 1
        assert sum(reader.control) == 2**64 - 1
    finally:
        reader.close()


def test_the_ring_refuses_a_weakly_ordered_machine(monkeypatch, ring_name):
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    with pytest.raises(RuntimeError, match="this machine is aarch64: refusing to start"):
        check_platform()
    with pytest.raises(RuntimeError, match="x86-64 store ordering"):
        Ring.create(ring_name, control_words=CONTROL_WORDS)
    assert not os.path.exists(os.path.join(SHM_DIR, ring_name))


def test_segment_names_are_plain_file_names():
    for bad in ("", "a/b", "..", "/dev/shm/x"):
        with pytest.raises(ValueError):
            Segment.create(bad, 64)


def test_counter_blocks_are_shared_across_attach():
    name = unique_name("counters")
    counters = CounterBlocks.create(name, blocks=3, words=5)
    try:
        exporter = CounterBlocks.attach(name)
        try:
            assert (exporter.blocks, exporter.words) == (3, 5)
            counters.block(1)[4] += 7
            counters.block(2)[0] += 1
            counters.block(0)[4] += 2  # blocks do not overlap
            assert [exporter.block(i).tolist() for i in range(3)] == [
                [0, 0, 0, 0, 2], [0, 0, 0, 0, 7], [1, 0, 0, 0, 0]]
            exporter.clear_block(1)
            assert counters.block(1).tolist() == [0] * 5
            assert counters.block(0)[4] == 2 and counters.block(2)[0] == 1
        finally:
            exporter.close()
    finally:
        counters.close()
        counters.unlink()
    assert not os.path.exists(os.path.join(SHM_DIR, name))
