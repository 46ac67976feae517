"""Reader processes race a writer through a small arena: every record is intact or None.

The test process writes 100,000 records of 1 B to 64 KiB into an 8 MiB arena (about 256
records fit), so the writer overwrites records while readers are copying them. Three
spawned readers follow the head as fast as they can. A record's bytes, key and meta are a
pure function of its id, so a reader checks every byte of what it got; it counts intact
records, records it lost to lag (None), and corrupt ones, which must never happen.
"""

import multiprocessing
import os
import random
import time
import uuid

from shm import Ring

RECORDS = 100_000
READERS = 3
ARENA = 8 << 20
DONE = 0  # control word: the writer has published every record
READY = 1  # control words READY + i: reader i is attached
POOL = random.Random(20240601).randbytes((1 << 20) + (64 << 10))
_MIX = 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1


def record_of(id: int) -> memoryview:
    """Record ``id``'s bytes: 1 B to 64 KiB of a random pool, size and offset hashed from id."""
    mixed = (id * _MIX) & _U64
    size = 1 + (mixed >> 48)
    offset = (mixed >> 8) % (1 << 20)
    return memoryview(POOL)[offset:offset + size]


def follow(name: str, index: int, results) -> None:
    """A reader process: follow the ring until the writer is done, then report its counts."""
    ring = Ring.attach(name)
    try:
        ring.control[READY + index] = 1
        intact = lagged = corrupt = 0
        last_seen, ascending, next_id = 0, True, 1
        while True:
            head = ring.head
            if next_id > head:
                if ring.control[DONE] and next_id > ring.head:
                    break
                os.sched_yield()
                continue
            for id in range(next_id, head + 1):
                record = ring.read(id)
                if record is None:
                    lagged += 1
                    continue
                ascending = ascending and record.id > last_seen
                last_seen = record.id
                expected = record_of(id)
                if record == (id, id, len(expected), expected):
                    intact += 1
                else:
                    corrupt += 1
            next_id = head + 1
        results.put((index, intact, lagged, corrupt, ascending))
    finally:
        ring.close()


def test_readers_racing_a_writer_never_see_a_torn_record():
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ring = Ring.create(f"murgw-test-{os.getpid()}-{uuid.uuid4().hex[:12]}-race", arena_bytes=ARENA,
                       control_words=READY + READERS)
    readers = [context.Process(target=follow, args=(ring.name, i, results), daemon=True)
               for i in range(READERS)]
    try:
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 60
        while not all(ring.control[READY + i] for i in range(READERS)):
            assert time.monotonic() < deadline, "the readers did not attach"
            assert all(reader.is_alive() for reader in readers), "a reader died at start"
            time.sleep(0.01)
        for id in range(1, RECORDS + 1):
            data = record_of(id)
            ring.append(id, id, len(data), data)
        ring.control[DONE] = 1
        reports = sorted(results.get(timeout=60) for _ in readers)
        for reader in readers:
            reader.join(timeout=10)
    finally:
        for reader in readers:
            if reader.is_alive():
                reader.kill()
                reader.join()
        ring.close()
        ring.unlink()

    for index, intact, lagged, corrupt, ascending in reports:
        print(f"reader {index}: {intact} intact, {lagged} lagged, {corrupt} corrupt")
        assert corrupt == 0
        assert ascending
        assert intact + lagged == RECORDS
        assert intact >= RECORDS // 200  # about 3,000 on a 2-core box
