"""Defaults found at start: the settings whose default is read from the machine, in one place.

An option whose default is not a constant (`Option.found` names how it is found, in words)
is resolved here, once: by `config_resolve.resolve` (workers), by the supervisor before any child starts
(the connections per worker, the listen backlog), by `--print-config` (which shows what a
start would resolve), and by each worker's request limits (the burst, which a reload may
change). The settings as loaded keep None for these, so a reload compares what the
operator wrote, not what the machine said.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from gateway.config import capacity
from gateway.common.board import MAX_WORKERS

SOMAXCONN_PATH = "/proc/sys/net/core/somaxconn"


def default_workers() -> int:
    """--workers when unset: one per CPU, at most the ring's control words."""
    return min(os.cpu_count() or 1, MAX_WORKERS)


def somaxconn() -> int:
    """The kernel's cap on any listen backlog (Linux: net.core.somaxconn)."""
    try:
        with open(SOMAXCONN_PATH) as fh:
            return max(1, int(fh.read().split()[0]))
    except (OSError, ValueError, IndexError):
        return socket.SOMAXCONN


def effective_listen_backlog(configured: int | None) -> int:
    """The accept queue a listen() gets: the configured value, or net.core.somaxconn when
    none is, never more than net.core.somaxconn (the kernel would cap it silently)."""
    limit = somaxconn()
    return limit if configured is None else min(configured, limit)


def request_burst(rate: float, burst: float | None) -> float:
    """The per-client request bucket's size: --client-request-burst, else twice the rate."""
    return 2 * rate if burst is None else burst


@dataclass(frozen=True)
class Found:
    """What a start resolves from the machine for `workers` workers."""

    max_connections: int  # per worker
    capacity_bound: str  # "descriptors", "memory" or "--max-connections"
    listen_backlog: int
    backlog_capped: bool  # --listen-backlog was above net.core.somaxconn
    descriptors: int  # the soft RLIMIT_NOFILE the workers run with

    def capacity(self, workers: int) -> int:
        return workers * self.max_connections


def at_start(workers: int, max_connections: int | None, listen_backlog: int | None,
             descriptors: int) -> Found:
    """The connections per worker (--max-connections, else from `descriptors` and memory) and
    the listen backlog (--listen-backlog capped at net.core.somaxconn, else that cap)."""
    backlog = effective_listen_backlog(listen_backlog)
    if max_connections is None:
        max_connections, bound = capacity.default_max_connections(workers, descriptors)
    else:
        bound = "--max-connections"
    return Found(max_connections, bound, backlog,
                 listen_backlog is not None and backlog < listen_backlog, descriptors)
