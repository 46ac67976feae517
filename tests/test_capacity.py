"""Capacity from the machine: the descriptor limit is raised at start and sets the default
connection limit; past it a request is refused with 503 and Retry-After, and counted."""

from __future__ import annotations

import contextlib

from gateway.capacity import FD_RESERVE, MEMORY_SHARE, PLAN_BYTES_PER_WATCHER, connection_limit
from support import SSEStream, running_gateway, wait_for
from test_limits import exchange, head, refusal
from test_observability import scrape

WATCH = "murmur.WatchSession"
SOFT, HARD = 64, FD_RESERVE + 12
CAPACITY_REFUSED = 'murgw_requests_refused_total{reason="capacity"}'


def open_files_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as fh:
        line = next(line for line in fh if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def test_the_descriptor_limit_is_raised_and_sets_the_default_connection_limit(tmp_path):
    with running_gateway(workers=1, metrics=True, nofile=(SOFT, HARD), tmp_path=tmp_path) as gw:
        logged = next(rec for rec in gw.logs() if rec.get("event") == "descriptor limit raised")
        assert (logged["soft_before"], logged["soft"], logged["hard"]) == (SOFT, HARD, HARD)
        limit = logged["max_connections"]
        assert limit == HARD - FD_RESERVE  # descriptors, not memory, are the bound here
        worker = wait_for(lambda: gw.worker_pids().get(0), what="the worker")
        assert open_files_limit(gw.pid) == open_files_limit(worker) == (HARD, HARD)
        streams = []
        try:
            streams = [SSEStream(gw.port, WATCH, {}) for _ in range(limit)]
            assert all(stream.status == 200 for stream in streams)
            refused = scrape(gw.metrics_port)[CAPACITY_REFUSED]
            answer = exchange(gw.port, head("GET", "/healthz", []), method="GET")
            assert refusal(answer, 503) and answer.headers["retry-after"] == "1"
            wait_for(lambda: scrape(gw.metrics_port)[CAPACITY_REFUSED] == refused + 1,
                     what="the refusal counted")
        finally:
            for stream in streams:
                with contextlib.suppress(OSError):
                    stream.close()


def test_the_connection_limit_is_the_smaller_of_descriptors_and_memory():
    watchers_in = lambda n: int(n * PLAN_BYTES_PER_WATCHER / MEMORY_SHARE)  # memory for n watchers
    assert connection_limit(20000, watchers_in(10**6), 2) == 20000 - FD_RESERVE  # descriptors bound
    assert connection_limit(10**6, watchers_in(30000), 2) == 15000  # memory bound, split over workers
    assert connection_limit(100, 0, 4) == 1  # never below one
