"""How many connections the gateway takes: from the machine, not from a constant.

At start the supervisor raises its soft RLIMIT_NOFILE to the hard limit (every child
inherits it): a worker holds one descriptor per connection, and the soft default (often
1024) would refuse watchers long before memory runs out. The default ``--max-connections``
(per worker) is then the smaller of

- the descriptors a worker may open, less FD_RESERVE for everything that is not a client
  (segments, control and wake-up sockets, the listening socket, imports, an accept burst);
- MEMORY_SHARE of the memory available (MemAvailable, or the cgroup's limit less its usage
  where that is smaller), at PLAN_BYTES_PER_WATCHER each, split over the workers.

Past that limit a request is refused with 503 and ``Retry-After`` (worker/door/admission.py), counted in
``murgw_requests_refused_total{reason="capacity"}``: a refusal the client can act on, where
running out of descriptors would leave connections waiting in the accept queue and running
out of memory would bring the OOM killer.
"""

from __future__ import annotations

import resource

from gateway.tuning import FD_RESERVE, MEMORY_SHARE, PLAN_BYTES_PER_WATCHER

MEMINFO = "/proc/meminfo"
CGROUP = "/sys/fs/cgroup"


def raise_nofile() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one; (soft before, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, hard


def memory_available() -> int:
    """Bytes this process could still allocate: MemAvailable, capped by a cgroup v2 limit."""
    available = _meminfo_bytes("MemAvailable")
    limit, usage = _cgroup_value("memory.max"), _cgroup_value("memory.current")
    if limit is not None and usage is not None:
        available = min(available, max(0, limit - usage))
    return available


def default_max_connections(workers: int, nofile: int) -> tuple[int, str]:
    """Connections per worker `nofile` descriptors and the memory available allow, and which
    of the two binds ("descriptors" or "memory"); gateway/config/found.py resolves it."""
    return connection_limit(nofile, memory_available(), workers)


def connection_limit(nofile: int, memory: int, workers: int) -> tuple[int, str]:
    """Per worker: the smaller of `nofile` less the reserve and its share of `memory`, and
    which of the two it is (the start-up banner says it, docs/sizing.md says what to raise)."""
    allowed = {"descriptors": nofile - FD_RESERVE,
               "memory": int(memory * MEMORY_SHARE) // PLAN_BYTES_PER_WATCHER // max(1, workers)}
    binding = min(allowed, key=allowed.__getitem__)
    return max(1, allowed[binding]), binding


def _meminfo_bytes(key: str) -> int:
    with open(MEMINFO) as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name == key:
                return int(rest.split()[0]) * 1024
    raise RuntimeError(f"{MEMINFO} has no {key}")


def _cgroup_value(name: str) -> int | None:
    """A cgroup v2 memory file of this process's cgroup, or None (no cgroup v2, or "max")."""
    try:
        with open("/proc/self/cgroup") as fh:
            path = next(line.split(":", 2)[2].strip() for line in fh if line.startswith("0::"))
        with open(f"{CGROUP}{path}/{name}") as fh:
            text = fh.read().strip()
    except (OSError, StopIteration, IndexError):
        return None
    return int(text) if text.isdigit() else None
