"""Process names: `murgw: supervisor 127.0.0.1:8080`, `murgw: worker 0 127.0.0.1:8080`,
`murgw: sequencer …`, `murgw: exporter …`: the role, then the address of the gateway's door
(--bind, its port resolved), so that two gateways on one host tell apart in ps.

Without them every process of the tree reads `python3 -B -c from multiprocessing.spawn
import spawn_main…` in ps, top and /proc/PID/cmdline, and an operator cannot tell which one
to look at. setproctitle rewrites the argument area the kernel shows (and the 15-character
`comm` name), which Python itself has no call for.
"""

from __future__ import annotations

import setproctitle

PREFIX = "murgw: "


def name(role: str) -> None:
    """Show this process as ``murgw: <role>`` (the role with the gateway's address)."""
    setproctitle.setproctitle(PREFIX + role)
