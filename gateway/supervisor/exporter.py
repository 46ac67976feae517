"""The exporter process: `/metrics` for Prometheus, summing every process's counter block.
Any other path is 404: health checks belong on the door's `/healthz` and `/readyz` (--bind),
which answer for the workers; a 200 here would only say the exporter runs.

Scrapes run here, never in a worker, so a scrape never steals a worker's CPU. The listening
socket is the supervisor's, bound before any child starts (so a port that cannot be bound
stops the start with one line) and handed to each exporter it starts: a replaced exporter
serves on the same address, and scrapes that arrive meanwhile wait in its accept queue.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import threading
import traceback
import urllib.parse
from http.server import ThreadingHTTPServer
from typing import Iterable

from prometheus_client import CollectorRegistry, MetricsHandler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from gateway import logs, version
from gateway.common import metrics
from gateway.common import procstat
from gateway.common.board import Board
from shm import CounterBlocks, Ring
from shm.segment import Handle


class GatewayCollector:
    def __init__(self, blocks: CounterBlocks, ring: Ring):
        self.blocks, self.ring, self.board = blocks, ring, Board(ring.control)
        self.build = [version(), platform.python_version()]  # murgw_build_info's labels

    def collect(self):
        yield self._build_info()
        yield from self._processes()
        yield from families(metrics.totals(self.blocks), [
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

    def _build_info(self) -> GaugeMetricFamily:
        """Which gateway and Python serve (1, labelled), as Prometheus's own build_info does."""
        info = GaugeMetricFamily(metrics.PREFIX + "build_info",
                                 "The gateway's version and the Python it runs on; always 1.",
                                 labels=["version", "python"])
        info.add_metric(self.build, 1)
        return info

    def _processes(self):
        cpu = CounterMetricFamily(metrics.PREFIX + "process_cpu_seconds",
                                  "CPU seconds each gateway process used.", labels=["process"])
        rss = GaugeMetricFamily(metrics.PREFIX + "process_resident_memory_bytes",
                                "Resident memory of each gateway process.", labels=["process"])
        fds = GaugeMetricFamily(metrics.PREFIX + "process_open_fds",
                                "Descriptors each gateway process holds open (a worker: one a client "
                                "connection, idle keep-alive ones included).", labels=["process"])
        max_fds = GaugeMetricFamily(metrics.PREFIX + "process_max_fds",
                                    "Descriptors each gateway process may open (its soft RLIMIT_NOFILE).",
                                    labels=["process"])
        for label, pid in metrics.pids(self.blocks) + [("exporter", os.getpid())]:
            found = procstat.cpu_and_rss(pid)
            if found is not None:
                cpu.add_metric([label], found[0])
                rss.add_metric([label], found[1])
            held = procstat.descriptors(pid)
            if held is not None:
                fds.add_metric([label], held[0])
                max_fds.add_metric([label], held[1])
        yield from (cpu, rss, fds, max_fds)
        yield from self._workers()

    def _workers(self):
        """Each worker's own gauges (metrics.WORKER_GAUGES), by worker: its requests against its limit."""
        found = metrics.by_worker(self.blocks)
        for name, help_text in metrics.WORKER_GAUGES.items():
            family = GaugeMetricFamily(metrics.PREFIX + name, help_text, labels=["process"])
            for label, values in found:
                family.add_metric([label], values[name])
            yield family


def families(sums: list[int], gauges: Iterable[tuple[str, str, float]] = ()):
    """prometheus-client metric families for the summed words (common/metrics.py's layout), plus
    extra plain gauges: built here, in the one process that serves them."""
    for name, (kind, help_text, label, values) in metrics.COUNTERS.items():
        if kind in ("pid", "worker"):  # the pid is not exported; worker gauges are, by worker
            continue
        family_cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        family = family_cls(metrics.PREFIX + name, help_text, labels=[label] if label else [])
        for value in values or ("",):
            family.add_metric([value] if label else [], max(0, sums[metrics.OFFSETS[(name, value)]]))
        yield family
    for name, (help_text, label, values, buckets, scale) in metrics.HISTOGRAMS.items():
        histogram = HistogramMetricFamily(metrics.PREFIX + name, help_text, labels=[label] if label else [])
        for value in values:
            base = metrics.OFFSETS[(name, value)]
            running, cumulative = 0, []
            for i, bound in enumerate(buckets):
                running += sums[base + i]
                cumulative.append((str(bound), running))
            running += sums[base + len(buckets)]
            cumulative.append(("+Inf", running))
            histogram.add_metric([value] if label else [], cumulative,
                                 sum_value=sums[base + len(buckets) + 1] / scale)
        yield histogram
    for name, help_text, reading in gauges:
        family = GaugeMetricFamily(metrics.PREFIX + name, help_text)
        family.add_metric([], reading)
        yield family


class MetricsOnly(MetricsHandler):
    """prometheus-client's handler on `/metrics`; 404 on any other path."""

    def do_GET(self) -> None:
        if urllib.parse.urlsplit(self.path).path == "/metrics":
            return super().do_GET()
        body = b"not found: the metrics are at /metrics; health checks: /healthz on --bind\n"
        self.send_response(404)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class MetricsServer(ThreadingHTTPServer):
    """prometheus-client's handler over a socket that is bound and listening already."""

    daemon_threads = True

    def __init__(self, listener: socket.socket, registry: CollectorRegistry):
        super().__init__(listener.getsockname()[:2], MetricsOnly.factory(registry),
                         bind_and_activate=False)
        self.socket.close()  # the one socketserver made; the supervisor's serves instead
        self.socket = listener

    def handle_error(self, request, client_address) -> None:
        """A request that failed (most often its client gone mid-answer): one log line, not
        socketserver's plain-text traceback on stderr (SECURITY.md, logs)."""
        logs.get("exporter").warning("metrics request failed", client=client_address[0],
                                     exc=traceback.format_exc().rstrip("\n"))


def main(listener: socket.socket, ring_segment: Handle, counters_segment: Handle) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.setup("warning", "exporter")  # it logs nothing of its own: what Python and libraries report
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
