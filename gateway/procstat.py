"""CPU seconds and resident memory of a process, read from /proc (Linux), for the exporter."""

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
