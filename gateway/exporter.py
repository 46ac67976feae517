"""The exporter process: `/metrics` for Prometheus, summing every process's counter block.

Scrapes run here, never in a worker, so a scrape never steals a worker's CPU.
"""

from __future__ import annotations

import signal
import threading
from multiprocessing.connection import Connection

from prometheus_client import CollectorRegistry, start_http_server

from gateway import control_words, metrics
from shm import CounterBlocks, Ring


class GatewayCollector:
    def __init__(self, blocks: CounterBlocks, ring: Ring):
        self.blocks, self.ring = blocks, ring

    def collect(self):
        words = self.ring.control
        yield from metrics.families(metrics.totals(self.blocks), [
            ("ring_head_id", "Id of the newest event in the ring.", self.ring.head),
            ("ring_oldest_id", "Id of the oldest event still in the ring (replay buffer).", self.ring.oldest),
            ("upstream_connected", "1 while the capsule (embedded or upstream) is connected.",
             1 if words[control_words.UPSTREAM_CONNECTED] else 0),
        ])


def main(host: str, port: int, ring_name: str, counters_name: str, ready: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ring = Ring.attach(ring_name)
    blocks = CounterBlocks.attach(counters_name)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(blocks, ring))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    ready.send(server.server_address[1])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
