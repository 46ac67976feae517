"""The exporter process: `/metrics` for Prometheus, summing every process's counter block.

Scrapes run here, never in a worker, so a scrape never steals a worker's CPU. The listening
socket is the supervisor's, bound before any child starts (so a port that cannot be bound
stops the start with one line) and handed to each exporter it starts: a replaced exporter
serves on the same address, and scrapes that arrive meanwhile wait in its accept queue.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, MetricsHandler

from gateway import metrics, procstat
from gateway.board import Board
from shm import CounterBlocks, Ring
from shm.segment import Handle


class GatewayCollector:
    def __init__(self, blocks: CounterBlocks, ring: Ring):
        self.blocks, self.ring, self.board = blocks, ring, Board(ring.control)

    def collect(self):
        yield from self._processes()
        yield from metrics.families(metrics.totals(self.blocks), [
            ("ring_head_id", "Id of the newest event in the ring.", self.ring.head),
            ("ring_oldest_id", "Id of the oldest event still in the ring (replay buffer).", self.ring.oldest),
            ("upstream_connected", "1 while the capsule (embedded or upstream) is connected.",
             int(self.board.upstream_connected)),
            *self._tls_expiry(self.board.tls_expiry),
        ])

    @staticmethod
    def _tls_expiry(expiry: int) -> list[tuple[str, str, float]]:
        """With TLS on, when --certfile expires (the supervisor read it at start)."""
        return [("tls_certificate_expiry_timestamp_seconds",
                 "When the served TLS certificate (--certfile) expires, in Unix seconds.", expiry)] if expiry else []


    def _processes(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cpu = CounterMetricFamily(metrics.PREFIX + "process_cpu_seconds",
                                  "CPU seconds each gateway process used.", labels=["process"])
        rss = GaugeMetricFamily(metrics.PREFIX + "process_resident_memory_bytes",
                                "Resident memory of each gateway process.", labels=["process"])
        for label, pid in metrics.pids(self.blocks) + [("exporter", os.getpid())]:
            found = procstat.cpu_and_rss(pid)
            if found is not None:
                cpu.add_metric([label], found[0])
                rss.add_metric([label], found[1])
        yield cpu
        yield rss


class MetricsServer(ThreadingHTTPServer):
    """prometheus-client's handler over a socket that is bound and listening already."""

    daemon_threads = True

    def __init__(self, listener: socket.socket, registry: CollectorRegistry):
        super().__init__(listener.getsockname()[:2], MetricsHandler.factory(registry),
                         bind_and_activate=False)
        self.socket.close()  # the one socketserver made; the supervisor's serves instead
        self.socket = listener


def main(listener: socket.socket, ring_segment: Handle, counters_segment: Handle) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ring = Ring.attach(ring_segment)
    blocks = CounterBlocks.attach(counters_segment)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(blocks, ring))
    server = MetricsServer(listener, registry)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    stop.wait()
    server.shutdown()
