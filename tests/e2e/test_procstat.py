"""gateway.common.procstat's descriptor count: what /proc says a process holds, without a
listing where the kernel gives the count (the exporter's process_open_fds on every scrape)."""

import os
import subprocess
import sys

import pytest

from gateway.common import procstat

pytestmark = pytest.mark.e2e

HOLD = 500  # descriptors the child opens beyond its own
CHILD = """\
import os, sys
fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(int(sys.argv[1]))]
print("held", flush=True)
sys.stdin.readline()
for fd in fds:
    os.close(fd)
print("closed", flush=True)
sys.stdin.readline()
"""
KERNEL_COUNTS = os.stat("/proc/self/fd").st_size > 0  # Linux 6.2 and later


def test_the_count_is_what_the_process_holds_as_it_changes(monkeypatch):
    with subprocess.Popen([sys.executable, "-c", CHILD, str(HOLD)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline() == "held\n"
            held = procstat.open_descriptors(child.pid)
            assert held == len(os.listdir(f"/proc/{child.pid}/fd"))
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline() == "closed\n"
            if KERNEL_COUNTS:  # the count is the kernel's, with no listing
                monkeypatch.setattr(procstat.os, "listdir", lambda path: pytest.fail(f"listed {path}"))
            assert procstat.open_descriptors(child.pid) == held - HOLD
            assert procstat.descriptors(child.pid)[0] == held - HOLD
            monkeypatch.undo()
        finally:
            child.kill()
            child.wait(timeout=10)
    with pytest.raises(OSError):
        procstat.open_descriptors(child.pid)  # gone
    assert procstat.descriptors(child.pid) is None
