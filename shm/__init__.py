"""The shared-memory ring and counters: bytes and integer ids across processes, no protocol.

See ``shm.ring`` for the ring's contract.
"""

from shm.counters import CounterBlocks
from shm.platform import check_platform
from shm.ring import Record, RecordTooLarge, Ring

__all__ = ["CounterBlocks", "Record", "RecordTooLarge", "Ring", "check_platform"]
