"""Process names: `murgw: supervisor`, `murgw: worker 0`, `murgw: sequencer`, `murgw: exporter`.

Without them every process of the tree reads `python3 -B -c from multiprocessing.spawn
import spawn_main…` in ps, top and /proc/PID/cmdline, and an operator cannot tell which one
to look at. setproctitle rewrites the argument area the kernel shows (and the 15-character
`comm` name), which Python itself has no call for.
"""

from __future__ import annotations

import setproctitle

PREFIX = "murgw: "


def name(role: str) -> None:
    """Show this process as ``murgw: <role>``."""
    setproctitle.setproctitle(PREFIX + role)
