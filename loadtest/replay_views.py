"""What the replay views hold (issue 44 item 1's memory): a window of 512 events of ~300 B, then
HEADS copies of one new event each (the window evicts its oldest at each), and STREAMS streams
opening a replay from 0 spread over those heads, as that many openings between copies would;
tracemalloc counts what the views add (gateway/worker/delivery/window.py, `Replay`).

    python -m loadtest.replay_views 100 10000
"""

from __future__ import annotations

import os
import sys
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402

from gateway.common import records  # noqa: E402
from gateway.protocol import events, states  # noqa: E402
from gateway.protocol.activation import WATCH_SESSION  # noqa: E402
from gateway.worker.delivery.stream import Stream  # noqa: E402
from gateway.worker.delivery.window import Window  # noqa: E402


def measure(heads: int, streams: int) -> dict:
    meta = records.make_meta(states.WORKING, records.FRAME)
    frame = events.text_frame("x" * 290, False)
    data = orjson.dumps(events.task_frame_event("tsk_a", "ctx_a", frame, state=states.WORKING, ts="t"))
    window = Window(512)
    for event_id in range(1, 513):
        window.put(event_id, 7, meta, data)
    window.head = window.oldest = 512
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    opened = []
    for _ in range(heads):
        window.put(window.head + 1, 7, meta, data)
        window.head += 1
        for _ in range(streams // heads):
            stream = Stream(endpoint=WATCH_SESSION, rpc_id_json=b"1")
            stream.start_replay(window, 0)
            opened.append(stream)
    grown = tracemalloc.take_snapshot().compare_to(before, "filename")
    tracemalloc.stop()
    views = sum(stat.size_diff for stat in grown if stat.traceback[0].filename.endswith("window.py"))
    return {"heads": heads, "streams": len(opened), "views": len({id(s.replay) for s in opened}),
            "window_py_kib": round(views / 1024, 1)}


if __name__ == "__main__":
    print(measure(int(sys.argv[1]), int(sys.argv[2])))
