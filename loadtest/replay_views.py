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

from gateway.bench_surface import (FRAME, WATCH_SESSION, WORKING, Stream, Window, make_meta,  # noqa: E402
                                    task_frame_event, text_frame)


def measure(heads: int, streams: int) -> dict:
    meta = make_meta(WORKING, FRAME)
    frame = text_frame("x" * 290, False)
    data = orjson.dumps(task_frame_event("tsk_a", "ctx_a", frame, state=WORKING, ts="t"))
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
