"""What /proc (Linux) says of a process: CPU seconds and resident memory for the exporter,
its state letter and its time spent waiting for a CPU for the stall watchdog (gateway/stall.py)."""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_and_rss(pid: int) -> tuple[float, int] | None:
    """(user + system CPU seconds, resident bytes), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/statm", "rb") as fh:
            resident_pages = int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    # fields[0] is the state (field 3 of stat); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS, resident_pages * _PAGE


def state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T stopped, t traced, Z, ...), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


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
