"""CPU seconds, resident memory and state of processes, read from /proc (Linux).

The gateway reads its own processes here: the exporter their CPU, memory and descriptors, the stall watch
(gateway/common/stall.py) whether a worker was stopped on purpose and how long it waited for a CPU.
The load tests (loadtest/) read a server's whole process tree (the gateway's supervisor,
sequencer, workers and exporter; nginx's master and workers) at the start and the end of a
measuring window and report the difference, so their figures cover the window only, not
start-up or the ramp of connections.
"""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat from `state` on (the name before it may hold spaces and parentheses),
    or None when the process is gone: [0] state, [1] parent pid, [11] utime, [12] stime."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _resident_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def _cpu_ticks(fields: list[bytes]) -> int:
    return int(fields[11]) + int(fields[12])  # utime, stime (threads included)


def cpu_and_rss(pid: int) -> tuple[float, int] | None:
    """(user + system CPU seconds, resident bytes), or None when the process is gone."""
    fields, resident = _stat_fields(pid), _resident_bytes(pid)
    if fields is None or resident is None:
        return None
    return _cpu_ticks(fields) / _TICKS, resident


def open_descriptors(pid: int) -> int:
    """The descriptors `pid` holds open (OSError when it is gone). Linux
    6.2 and later give the count as /proc/PID/fd's size, read from the process's table at
    once; older kernels give 0 there, and the directory is listed, an entry a descriptor:
    13 ms for a worker holding 17,000, a scrape of 100,000 watchers' workers ~80 ms of the
    core they share (loadtest/RESULTS.md run 16)."""
    return os.stat(f"/proc/{pid}/fd").st_size or len(os.listdir(f"/proc/{pid}/fd"))


def descriptors(pid: int) -> tuple[int, int] | None:
    """(descriptors open, the soft RLIMIT_NOFILE it may open), or None when the process is
    gone."""
    try:
        open_now = open_descriptors(pid)
        with open(f"/proc/{pid}/limits", "rb") as fh:
            line = next(line for line in fh if line.startswith(b"Max open files"))
        soft = int(line.split()[3])  # never "unlimited": RLIMIT_NOFILE has no such value
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return open_now, soft


def state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T stopped, t traced, Z, ...), or None when gone."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[0].decode()


def tree(root: int) -> list[int]:
    """`root` and every live descendant."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """user + system CPU of these processes (threads included), in seconds."""
    return sum(_cpu_ticks(fields) for fields in map(_stat_fields, pids) if fields is not None) / _TICKS


def rss_kib(pids: list[int]) -> int:
    """Summed resident memory of these processes in KiB (VmRSS: shared pages count once per
    process)."""
    return sum(resident for resident in map(_resident_bytes, pids) if resident is not None) // 1024


def run_queue_wait_ns(pid: int) -> int | None:
    """Nanoseconds the process's main thread has spent runnable but waiting for a CPU (the second
    field of /proc/PID/schedstat; the first is its time run), or None when the process is gone
    or the kernel has no such file. A kernel built without the accounting shows zeros."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            return int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def counts_run_queue_wait() -> bool:
    """Whether this kernel accounts run-queue waits: this process has run, so its own
    /proc/self/schedstat shows time run when the accounting is on (and zeros when off)."""
    try:
        with open("/proc/self/schedstat", "rb") as fh:
            return int(fh.read().split()[0]) > 0
    except (OSError, IndexError, ValueError):
        return False
