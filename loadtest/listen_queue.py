"""The machine's side of a reconnect storm: the kernel's listen-queue counters, the accept
queue's depth while the storm opens, how the workers split the connections, and the sysctls
that bound the queue (loadtest/storm.py reports them beside its own figures)."""

from __future__ import annotations

import re
import subprocess
import threading
import time

NSTAT_COUNTERS = ("TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtSyncookiesSent",
                  "TcpExtSyncookiesRecv", "TcpExtSyncookiesFailed", "TcpExtTCPReqQFullDoCookies",
                  "TcpExtTCPReqQFullDrop", "TcpPassiveOpens", "TcpAttemptFails", "TcpExtTCPAbortOnData")


def nstat() -> dict:
    """Absolute values of the kernel's listen-queue and SYN-cookie counters (history untouched)."""
    try:
        out = subprocess.run(["nstat", "-asz", *NSTAT_COUNTERS], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = dict.fromkeys(NSTAT_COUNTERS, 0)
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in values:
            values[fields[0]] = int(fields[1])
    return values


def connections_by_process(port: int) -> dict:
    """Established connections on the server port, by the pid that holds them (`ss -p`)."""
    try:
        out = subprocess.run(["ss", "-Htnp", "state", "established", f"( sport = :{port} )"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    counts: dict[str, int] = {}
    for pid in re.findall(r"pid=(\d+)", out):
        counts[pid] = counts.get(pid, 0) + 1
    return dict(sorted(counts.items()))


def accept_queue(port: int) -> int | None:
    """Connections waiting in the listening socket's accept queue now (`ss -l`'s Recv-Q)."""
    try:
        out = subprocess.run(["ss", "-Hltn", f"( sport = :{port} )"], capture_output=True, text=True,
                             timeout=5).stdout.split()
        return int(out[1])
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return None


class QueueSampler(threading.Thread):
    """The accept queue's depth every `every` seconds while the storm opens."""

    def __init__(self, port: int, every: float = 0.25):
        super().__init__(daemon=True)
        self.port, self.every = port, every
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopping.wait(self.every):
            depth = accept_queue(self.port)
            if depth is not None:
                self.samples.append((round(time.monotonic() - started, 2), depth))

    def report(self) -> dict:
        self.stopping.set()
        self.join(10)
        depths = [depth for _, depth in self.samples]
        return {"max": max(depths, default=None), "samples": len(depths),
                "nonempty_s": round(sum(1 for d in depths if d) * self.every, 2),
                "every_1s": [[t, d] for i, (t, d) in enumerate(self.samples) if i % round(1 / self.every) == 0]}


def sysctls() -> dict:
    values: dict[str, int | None] = {}
    for name in ("net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_syncookies"):
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as fh:
                values[name] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            values[name] = None
    return values
