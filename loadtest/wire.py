"""The load event every system in the bench carries, byte for byte the gateway's `--sim-load` frame.

`gateway/sequencer/capsule/runner.py` writes a text frame whose text is the encode time in ns, a space,
then `x` padding up to `--sim-load-size` characters, inside the task-frame carrier (a
`statusUpdate` with the frame under the stream extension's metadata). The naive baseline and
the nchan publisher build the same carrier here, so every system moves the same bytes and
the driver reads the same timestamp from each. The nchan publisher also numbers its
messages (`seq`) after the timestamp, because nchan's own ids (`<time>:<tag>`) cannot show
a lost message.
"""

from __future__ import annotations

import time

import orjson

from gateway.bench_surface import new_context_id, new_task_id, task_frame_event, text_frame

TASK_ID = new_task_id()
CONTEXT_ID = new_context_id()


def load_text(size: int, seq: int | None = None) -> str:
    stamp = f"{time.time_ns()} " if seq is None else f"{time.time_ns()} {seq} "
    return stamp + "x" * max(0, size - len(stamp))


def load_result(size: int, seq: int | None = None) -> bytes:
    """The StreamResponse JSON of one load event, encoded now (its timestamp is now)."""
    frame = text_frame(load_text(size, seq), False)
    return orjson.dumps(task_frame_event(TASK_ID, CONTEXT_ID, frame))
