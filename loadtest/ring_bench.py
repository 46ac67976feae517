"""Micro-benchmark of the shared-memory ring: one writer process, 1 or 3 reader processes.

For 300 B and 16 KiB records, the writer appends as fast as it can for a few seconds while
spawned readers follow the head and read every record they can reach. Prints records/s and
MB/s written, and per reader records/s and MB/s read plus the share of records it lost to
lag. Readers and writer share the machine's cores, so on a small box the readers' figures
also show how much CPU the writer leaves them. Reports numbers, asserts nothing.

    python loadtest/ring_bench.py
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from shm import Ring  # noqa: E402

SECONDS = 3.0
DONE = 0  # control word: the writer stopped
READY = 1  # control words READY + i: reader i is attached


def follow(name: str, index: int, results) -> None:
    ring = Ring.attach(name)
    try:
        ring.control[READY + index] = 1
        read = lost = 0
        next_id = 1
        while not ring.head:
            os.sched_yield()
        started = time.perf_counter()
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
                    lost += 1
                else:
                    read += 1
            next_id = head + 1
        results.put((read, lost, time.perf_counter() - started))
    finally:
        ring.close()


def run(record_bytes: int, readers: int) -> tuple[float, list[tuple[int, int, float]]]:
    """(records written a second, each reader's (records read, records lost, seconds))."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ring = Ring.create(f"murgw-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}", control_words=READY + readers)
    processes = [context.Process(target=follow, args=(ring.name, i, results), daemon=True)
                 for i in range(readers)]
    try:
        for process in processes:
            process.start()
        while not all(ring.control[READY + i] for i in range(readers)):
            time.sleep(0.01)
        data = os.urandom(record_bytes)
        id = 0
        started = time.perf_counter()
        stop = started + SECONDS
        while time.perf_counter() < stop:
            for _ in range(1000):
                id += 1
                ring.append(id, id, 0, data)
        written = id / (time.perf_counter() - started)
        ring.control[DONE] = 1
        reports = [results.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(timeout=10)
        return written, reports
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        ring.close()
        ring.unlink()


def main() -> None:
    print(f"{os.cpu_count()} CPUs, {SECONDS:.0f} s a run, 512 slots, 64 MiB arena")
    print("reader figures: the mean of the readers")
    print(f"{'record':>8} {'readers':>7} {'written/s':>11} {'MB/s':>7} "
          f"{'read/s per reader':>18} {'MB/s':>7} {'lost':>6}")
    for record_bytes in (300, 16 << 10):
        for readers in (1, 3):
            written, reports = run(record_bytes, readers)
            read_rate = sum(read / elapsed for read, _, elapsed in reports) / readers
            lost_share = sum(lost / max(1, read + lost) for read, lost, _ in reports) / readers
            print(f"{record_bytes:>8} {readers:>7} {written:>11,.0f} "
                  f"{written * record_bytes / 1e6:>7,.0f} {read_rate:>18,.0f} "
                  f"{read_rate * record_bytes / 1e6:>7,.0f} {lost_share:>6.0%}")


if __name__ == "__main__":
    main()
