"""CPU seconds and resident memory of a server's whole process tree, read from /proc.

A server under test is a process and its descendants (the gateway's supervisor, sequencer,
workers and exporter; nginx's master and workers). The bench and the driver read the tree
at the start and the end of a measuring window and report the difference, so the figures
cover the window only, not start-up or the ramp of connections.
"""

from __future__ import annotations

import os

TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from `state` on; the name may hold spaces


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
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def rss_kib(pids: list[int]) -> int:
    """Summed VmRSS of these processes in KiB (shared pages count once per process)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total
