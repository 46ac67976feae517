"""The one hardware assumption of the ring: x86-64 store ordering.

The ring publishes records with plain 8-byte stores and no memory barriers (CPython emits
none). That is correct only where stores are not reordered with stores and loads not with
loads: x86-64's total store order (TSO). On a weakly ordered CPU (ARM64, POWER) a reader
could see a slot's sequence word before the bytes it guards, so the ring refuses to start
there rather than serve torn records.
"""

import platform

_TSO_MACHINES = frozenset({"x86_64", "AMD64"})


def check_platform() -> None:
    machine = platform.machine()
    if machine not in _TSO_MACHINES:
        raise RuntimeError(
            "murmur-gateway's shared-memory ring relies on x86-64 store ordering (TSO); "
            f"this machine is {machine}: refusing to start until the ring has memory barriers"
        )
