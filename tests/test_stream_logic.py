"""gateway/worker/stream.py in-process: the bytes a stream decides and how it ends, read from a
window filled as the pump fills it, with no server, socket or hub. The spec's rules each
stream applies: lag (skip to head - 128, one `lagged` frame on an activated connection),
replay, heartbeats, task endings (live and replayed), a lost task stream's ending from its
task, the plain form, and the session's end."""

from __future__ import annotations

import orjson

from gateway import records
from gateway.protocol import events, sse, states
from gateway.protocol.lag import LAG_LIMIT
from gateway.protocol.parser import SSEParser, read_stream_response
from gateway.protocol.activation import SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK, WATCH_SESSION
from gateway.worker.stream import Stream, TaskView
from gateway.worker.window import PIECE_BYTES, Window

TASK_KEY = 7
TASK = {"id": "tsk_a", "contextId": "ctx_a", "status": {"state": states.WORKING, "timestamp": "t"}}
RPC_ID = b'"r1"'


def status_event(state: str, key: int = TASK_KEY, task_id: str = "tsk_a") -> tuple[int, int, bytes]:
    status = {"state": state, "timestamp": "t"}
    return key, records.status_meta(state), orjson.dumps(events.status_update(task_id, "ctx_a", status))


def frame_event(text: str, key: int = TASK_KEY) -> tuple[int, int, bytes]:
    result = events.task_frame_event("tsk_a", "ctx_a", events.text_frame(text, False), state=states.WORKING, ts="t")
    return key, records.make_meta(states.WORKING, records.FRAME), orjson.dumps(result)


def fill(window: Window, *records_: tuple[int, int, bytes], first: int | None = None) -> None:
    """Put records after the head, as the pump does, and move the head."""
    event_id = window.head if first is None else first - 1
    for key, meta, data in records_:
        event_id += 1
        window.put(event_id, key, meta, data)
    window.head = event_id


def watcher() -> Stream:
    return Stream(endpoint=WATCH_SESSION, rpc_id_json=RPC_ID)


def task_stream(method: str = SUBSCRIBE_TO_TASK, activated: bool = True) -> Stream:
    view = TaskView(TASK, TASK_KEY, ends_on_input=method == SEND_STREAMING_MESSAGE)
    return Stream(endpoint=method, rpc_id_json=RPC_ID, task=view, activated=activated)


def parse(body: bytes) -> list[tuple[int | None, object]]:
    """(event id, StreamResponse item) of each event in `body`; heartbeats as ("heartbeat", None)."""
    out = []
    for chunk in body.split(b"\n\n")[:-1]:
        if chunk == sse.HEARTBEAT[:-2]:
            out.append(("heartbeat", None))
            continue
        (event,) = SSEParser().feed(chunk + b"\n\n")
        rpc_id, item, error = read_stream_response(event.data.encode())
        assert rpc_id == "r1" and error is None
        out.append((None if event.id is None else int(event.id), item))
    return out


def test_a_watcher_takes_every_pending_event_in_one_body():
    window, stream = Window(512), watcher()
    fill(window, frame_event("a"), frame_event("b", key=9), status_event(states.COMPLETED))
    body = stream.gather(window)
    assert [event_id for event_id, _ in parse(body)] == [1, 2, 3]
    assert body.startswith(b'id: 1\ndata: {"jsonrpc":"2.0","id":"r1","result":{"statusUpdate"')
    assert stream.cursor == 3 and not stream.ended
    assert stream.gather(window) == b""  # nothing new


def test_watchers_in_step_share_one_batch_counted_by_its_takers():
    window, first, second = Window(512), watcher(), watcher()
    fill(window, frame_event("a"), frame_event("b"))
    body = first.gather(window)
    assert second.gather(window) is body  # one join for both
    (batch,) = window.taken_batches()
    assert (batch.events, batch.lag, batch.takers) == (2, 2, 2)
    assert first.noted is None  # nothing of its own to count: the batch carries it


def test_a_connection_past_the_lag_limit_skips_and_writes_one_lagged_frame():
    window, stream = Window(512), watcher()
    fill(window, *[frame_event(str(i)) for i in range(300)])
    items = parse(stream.gather(window))
    skipped = 300 - LAG_LIMIT
    assert items[0][0] is None and items[0][1].frame == {"frame": "lagged", "missed": skipped}
    assert [event_id for event_id, _ in items[1:]] == list(range(skipped + 1, 301))
    noted = stream.noted
    assert (noted.lag, noted.missed, noted.lagged_frames, noted.delivered) == (300, skipped, 1, LAG_LIMIT)


def test_a_plain_task_stream_lags_without_a_frame_and_never_sees_frames():
    window, stream = Window(512), task_stream(activated=False)
    fill(window, *[frame_event(str(i)) for i in range(200)], status_event(states.WORKING))
    items = parse(stream.gather(window))
    assert [event_id for event_id, _ in items] == [201]  # the frames are not for it; no lagged frame
    assert stream.noted.missed == 201 - LAG_LIMIT and stream.lost


def test_a_hole_in_the_window_is_lost_and_named_before_the_next_event():
    window, stream = Window(512), watcher()
    fill(window, frame_event("a"), frame_event("b"), frame_event("c"))
    window.drop(2)
    items = parse(stream.gather(window))
    assert [event_id for event_id, _ in items] == [1, None, 3]
    assert items[1][1].frame == {"frame": "lagged", "missed": 1}


def test_replay_writes_what_follows_last_event_id_for_its_filter():
    window, stream = Window(512), task_stream()
    fill(window, frame_event("a"), frame_event("x", key=9), frame_event("b"), status_event(states.COMPLETED),
         frame_event("after"))
    stream.start_replay(window, 1)
    assert [event_id for event_id, _ in parse(stream.gather(window))] == [3, 4]
    assert stream.ended  # the terminal status ended it


def test_a_replayed_input_required_does_not_end_a_send_streaming_message_stream():
    window, stream = Window(512), task_stream(SEND_STREAMING_MESSAGE)
    fill(window, status_event(states.INPUT_REQUIRED))
    stream.start_replay(window, 0)
    assert [event_id for event_id, _ in parse(stream.gather(window))] == [1] and not stream.ended
    fill(window, status_event(states.INPUT_REQUIRED))
    stream.gather(window)
    assert stream.ended  # live, it does


def test_a_subscription_ends_at_its_terminal_status_only():
    window, stream = Window(512), task_stream()
    fill(window, status_event(states.INPUT_REQUIRED), status_event(states.COMPLETED), frame_event("late"))
    items = parse(stream.gather(window))
    assert [event_id for event_id, _ in items] == [1, 2]
    assert stream.ended and stream.cursor == 2 and stream.last_state == states.COMPLETED


def test_a_due_heartbeat_follows_the_events():
    window, stream = Window(512), watcher()
    fill(window, frame_event("a"))
    stream.heartbeat_due = 12.5
    body = stream.gather(window)
    assert body.endswith(b"\n\n" + sse.HEARTBEAT) and stream.noted.beat_due == 12.5
    assert stream.heartbeat_due is None and not stream.check_due


def test_a_lost_task_stream_checks_its_task_at_heartbeats_and_writes_the_ending_found():
    window, stream = Window(512), task_stream()
    fill(window, *[frame_event(str(i), key=9) for i in range(200)])
    stream.gather(window)
    assert stream.lost and not stream.check_due
    stream.heartbeat_due = 1.0
    assert stream.gather(window) == sse.HEARTBEAT and stream.check_due
    working = {**TASK, "status": {"state": states.WORKING, "timestamp": "t"}}
    assert stream.ending_from(working) == b"" and not stream.ended
    artifact = events.response_artifact("done", "art_1")
    ended = {**TASK, "status": {"state": states.COMPLETED, "timestamp": "t"}, "artifacts": [artifact]}
    items = parse(stream.ending_from(ended))
    assert [(event_id, item.kind) for event_id, item in items] == [
        (None, "statusUpdate"), (None, "artifactUpdate"), (None, "statusUpdate")]
    assert items[0][1].frame == {"frame": "lagged", "missed": 200 - LAG_LIMIT}  # what it lost, first
    assert items[1][1].body["artifact"] == artifact and stream.ended
    assert stream.pending_missed == 0 and stream.noted.lagged_frames == 1


def test_the_session_end_writes_capsule_closed_to_watchers_after_the_last_event():
    window, stream, subscriber = Window(512), watcher(), task_stream()
    fill(window, frame_event("a"))
    window.session_closed_at = 3  # one more event is still to come
    assert [event_id for event_id, _ in parse(stream.gather(window))] == [1] and not stream.ended
    fill(window, frame_event("b"))
    items = parse(stream.gather(window))
    assert items[0][0] == 2 and items[1][1].frame == {"frame": "capsule-closed"} and stream.ended
    subscriber.cursor = 2
    assert subscriber.gather(window) == b"" and subscriber.ended  # a task stream just ends


def test_a_new_session_ends_every_stream():
    window, stream = Window(512), task_stream()
    stream.session_changed = True
    assert stream.gather(window) == b"" and stream.ended


def test_a_task_frame_rides_the_last_known_state():
    window, stream = Window(512), task_stream()
    fill(window, status_event(states.INPUT_REQUIRED))
    stream.gather(window)
    (item,) = [item for _, item in parse(stream.connection_frame(events.lagged_frame(3)))]
    assert item.body["status"]["state"] == states.INPUT_REQUIRED and item.frame["missed"] == 3


def big_frames(n: int) -> list[tuple[int, int, bytes]]:
    """`n` text frames of about 300 bytes each, as --sim-load-size 300 writes them."""
    return [frame_event(f"{i:06d} " + "x" * 290) for i in range(n)]


def gather_all(stream: Stream, window: Window, limit: int = 100) -> list[bytes]:
    """Every body the stream writes until it has nothing more, one gather per write."""
    bodies = []
    for _ in range(limit):
        body = stream.gather(window)
        if not body:
            return bodies
        bodies.append(body)
    raise AssertionError("the stream never caught up")


def test_a_replay_is_written_in_bounded_pieces_each_event_once_in_order():
    window, stream = Window(512), watcher()
    fill(window, *big_frames(512))
    stream.start_replay(window, 0)
    bodies = gather_all(stream, window)
    event_size = len(window.entry(1).wire(stream.prefix, stream.plain))
    assert len(bodies) > 1 and all(len(body) < PIECE_BYTES + event_size for body in bodies)
    ids = [event_id for body in bodies for event_id, _ in parse(body)]
    assert ids == list(range(1, 513))  # no lagged frame: nothing was lost


def test_the_lag_rule_holds_for_live_events_after_the_replay_not_inside_it():
    window, stream = Window(512), watcher()
    fill(window, *big_frames(300))
    stream.start_replay(window, 0)
    first = parse(stream.gather(window))
    fill(window, *big_frames(150))  # live, while the replay is still being written
    rest = [item for body in gather_all(stream, window) for item in parse(body)]
    ids = [event_id for event_id, _ in first + rest]
    skipped = 450 - LAG_LIMIT - 300  # the live events beyond the queue of 128
    assert ids == list(range(1, 301)) + [None] + list(range(301 + skipped, 451))
    assert [item.frame for event_id, item in rest if event_id is None] == [{"frame": "lagged", "missed": skipped}]


def test_events_that_leave_the_window_mid_replay_are_named_by_a_lagged_frame():
    window, stream = Window(512), watcher()
    fill(window, *big_frames(512))
    stream.start_replay(window, 0)
    first = [event_id for event_id, _ in parse(stream.gather(window))]
    fill(window, *big_frames(300))  # ids 513..812 overwrite 1..300 before the reader got them
    rest = [item for body in gather_all(stream, window) for item in parse(body)]
    ids = first + [event_id for event_id, _ in rest]
    lagged = [item.frame["missed"] for event_id, item in rest if event_id is None]
    assert lagged == [300 - first[-1], 812 - LAG_LIMIT - 512]  # evicted replay events, then live lag
    numbered = [i for i in ids if i is not None]
    assert numbered == sorted(set(numbered))  # ascending, none twice
    assert len(numbered) + sum(lagged) == 812  # every event delivered or named lost
    assert numbered[-1] == 812 and stream.cursor == 812


def test_a_task_stream_replays_in_pieces_and_skips_other_tasks():
    window, stream = Window(512), task_stream()
    mine = big_frames(400)
    fill(window, *[event if i % 4 else (9, *event[1:]) for i, event in enumerate(mine)])
    stream.start_replay(window, 0)
    bodies = gather_all(stream, window)
    ids = [event_id for body in bodies for event_id, _ in parse(body)]
    assert len(bodies) > 1 and ids == [i + 1 for i in range(400) if i % 4]


def test_a_replay_the_ring_overwrote_entirely_counts_each_lost_event_once():
    window, stream = Window(512), watcher()
    fill(window, *big_frames(512))
    stream.start_replay(window, 0)
    first = [event_id for event_id, _ in parse(stream.gather(window))]
    fill(window, *big_frames(1000))  # ids 513..1512: the whole replay and more left the window
    rest = [item for body in gather_all(stream, window) for item in parse(body)]
    numbered = first + [event_id for event_id, _ in rest if event_id is not None]
    lagged = [item.frame["missed"] for event_id, item in rest if event_id is None]
    assert numbered == list(range(1, first[-1] + 1)) + list(range(1512 - LAG_LIMIT + 1, 1513))
    assert len(numbered) + sum(lagged) == 1512
