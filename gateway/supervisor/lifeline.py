"""Children never outlive the supervisor.

Every child the supervisor starts (sequencer, workers, exporter) runs `child_main` first,
which asks the kernel for SIGKILL the moment its parent dies (``prctl(PR_SET_PDEATHSIG)``)
and then checks that its parent is still the supervisor: a supervisor that died between
the fork and the prctl left the child re-parented already, and the kernel would never
send the signal, so the child exits at once.

Why the kernel's parent-death signal and not a liveness pipe whose EOF each child watches:
the signal reaches a child whatever it is doing, a worker whose event loop is blocked or
spinning included (a pipe is only noticed by a loop that turns), and it needs no code in
the children's loops. SIGKILL and not SIGTERM: a child without its supervisor has nothing
to drain for and nothing to give back that the kernel does not take (the listening socket,
the memfd segments, the abstract control socket). The signal follows the death of the
parent *thread* that forked: the supervisor starts every child from its main thread,
whose end is the process's end.

multiprocessing's resource tracker is not started (`without_resource_tracker`). The spawn
context starts one with the first child, to unlink named semaphores and shared_memory blocks
that a dead process leaves; the gateway makes neither (its segments are memfds, its control
socket abstract: the kernel takes both back), so the tracker would only be one more process,
unnamed, in ps.
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Any, Callable

from gateway.supervisor import proctitle

PR_SET_PDEATHSIG = 1


def bind_to_parent(supervisor_pid: int) -> None:
    """SIGKILL this process when its parent dies; exit now if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != supervisor_pid:
        os._exit(1)


def child_main(supervisor_pid: int, role: str, target: Callable[..., Any], *args: Any) -> None:
    """A child's entry point (spawn context): bound to the supervisor, named after its role
    (supervisor/proctitle.py), then `target(*args)`."""
    bind_to_parent(supervisor_pid)
    proctitle.name(role)
    # A terminal's hangup reaches the whole process group: only the supervisor reloads on
    # it (supervisor/process.py), the children carry on.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    target(*args)


def without_resource_tracker() -> None:
    """Keep the spawn context from starting multiprocessing's resource tracker: its handle
    (the write end of the tracker's pipe, which every child inherits) is set to /dev/null
    before the first child, so the tracker counts as running and nothing is ever tracked.
    On a Python whose tracker keeps no such handle, the tracker starts as before."""
    from multiprocessing import resource_tracker

    tracker = getattr(resource_tracker, "_resource_tracker", None)
    if tracker is not None and getattr(tracker, "_fd", False) is None and getattr(tracker, "_pid", False) is None:
        tracker._fd = os.open(os.devnull, os.O_WRONLY)
