"""gateway/worker/delivery/stream.py in-process: the bytes a stream decides, what its steps say happened
and the states they move it through, read from a window filled as the pump fills it, with no
server, socket or hub. The spec's rules each stream applies: lag (skip to head - 128, one
`lagged` frame on an activated connection), replay, heartbeats, task endings (live and
replayed), a lost task stream's ending from its task, the plain form, and the session's end.
Then the state table itself: every move it names and every move it refuses (exhaustive over
short walks), and what each step says happened for each kind of stream."""

from __future__ import annotations

import itertools

import orjson
import pytest

from gateway.common import records
from gateway.protocol import events, sse, states
from gateway.protocol.lag import LAG_LIMIT
from gateway.protocol.parser import SSEParser, read_stream_response
from gateway.protocol.activation import SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK, WATCH_SESSION
from gateway.worker.delivery import stream as machine
from gateway.worker.delivery.stream import (CHECK, CHECKING, END, ENDING, OPENED, PARKED, TRANSITIONS, Happened,
                                            State, Stream, StreamStateError, TaskView)
from gateway.worker.delivery.window import PIECE_BYTES, Window

pytestmark = pytest.mark.unit

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


def opened(stream: Stream) -> Stream:
    """The stream as the hub holds it once its opening was written: PARKED."""
    stream.move(OPENED)
    return stream


def watcher() -> Stream:
    return opened(Stream(endpoint=WATCH_SESSION, rpc_id_json=RPC_ID))


def task_stream(method: str = SUBSCRIBE_TO_TASK, activated: bool = True) -> Stream:
    view = TaskView(TASK, TASK_KEY, ends_on_input=method == SEND_STREAMING_MESSAGE)
    return opened(Stream(endpoint=method, rpc_id_json=RPC_ID, task=view, activated=activated))


def gather(stream: Stream, window: Window, beat_due: float | None = None):
    """One gather, moved as the hub moves it (what happened, when anything did); its
    (body, happened, noted)."""
    body, happened, noted = stream.gather(window, beat_due)
    if happened is not None:
        stream.move(happened)
    return body, happened, noted


def body_of(stream: Stream, window: Window) -> bytes:
    return gather(stream, window)[0]


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
    body = body_of(stream, window)
    assert [event_id for event_id, _ in parse(body)] == [1, 2, 3]
    assert body.startswith(b'id: 1\ndata: {"jsonrpc":"2.0","id":"r1","result":{"statusUpdate"')
    assert stream.cursor == 3 and not stream.ended
    assert stream.gather(window) == (b"", None, None)  # nothing new, nothing happened


def test_watchers_in_step_share_one_batch_counted_by_its_takers():
    window, first, second = Window(512), watcher(), watcher()
    fill(window, frame_event("a"), frame_event("b"))
    body, happened, noted = first.gather(window)
    assert second.gather(window)[0] is body  # one join for both
    assert window.taken() == [(2, 2, 2)]  # (events, lag, takers)
    assert window.taken() == []  # counted once
    assert happened is None and noted is None  # nothing of its own to count: the batch carries it


def test_a_connection_past_the_lag_limit_skips_and_writes_one_lagged_frame():
    window, stream = Window(512), watcher()
    fill(window, *[frame_event(str(i)) for i in range(300)])
    body, _, noted = gather(stream, window)
    items = parse(body)
    skipped = 300 - LAG_LIMIT
    assert items[0][0] is None and items[0][1].frame == {"frame": "lagged", "missed": skipped}
    assert [event_id for event_id, _ in items[1:]] == list(range(skipped + 1, 301))
    assert (noted.lag, noted.missed, noted.lagged_frames, noted.delivered) == (300, skipped, 1, LAG_LIMIT)


def test_a_plain_task_stream_lags_without_a_frame_and_never_sees_frames():
    window, stream = Window(512), task_stream(activated=False)
    fill(window, *[frame_event(str(i)) for i in range(200)], status_event(states.WORKING))
    body, _, noted = gather(stream, window)
    assert [event_id for event_id, _ in parse(body)] == [201]  # the frames are not for it; no lagged frame
    assert noted.missed == 201 - LAG_LIMIT and stream.lost


def test_a_hole_in_the_window_is_lost_and_named_before_the_next_event():
    window, stream = Window(512), watcher()
    fill(window, frame_event("a"), frame_event("b"), frame_event("c"))
    window.drop(2)
    items = parse(body_of(stream, window))
    assert [event_id for event_id, _ in items] == [1, None, 3]
    assert items[1][1].frame == {"frame": "lagged", "missed": 1}


def test_replay_writes_what_follows_last_event_id_for_its_filter():
    window, stream = Window(512), task_stream()
    fill(window, frame_event("a"), frame_event("x", key=9), frame_event("b"), status_event(states.COMPLETED),
         frame_event("after"))
    stream.start_replay(window, 1)
    body, happened, _ = gather(stream, window)
    assert [event_id for event_id, _ in parse(body)] == [3, 4]
    assert happened is END and stream.ended  # the terminal status ended it


def test_a_replayed_input_required_does_not_end_a_send_streaming_message_stream():
    window, stream = Window(512), task_stream(SEND_STREAMING_MESSAGE)
    fill(window, status_event(states.INPUT_REQUIRED))
    stream.start_replay(window, 0)
    assert [event_id for event_id, _ in parse(body_of(stream, window))] == [1] and not stream.ended
    fill(window, status_event(states.INPUT_REQUIRED))
    gather(stream, window)
    assert stream.ended  # live, it does


def test_a_subscription_ends_at_its_terminal_status_only():
    window, stream = Window(512), task_stream()
    fill(window, status_event(states.INPUT_REQUIRED), status_event(states.COMPLETED), frame_event("late"))
    items = parse(body_of(stream, window))
    assert [event_id for event_id, _ in items] == [1, 2]
    assert stream.ended and stream.cursor == 2 and stream.last_state == states.COMPLETED


def test_a_due_heartbeat_follows_the_events():
    window, stream = Window(512), watcher()
    fill(window, frame_event("a"))
    body, happened, noted = gather(stream, window, beat_due=12.5)
    assert body.endswith(b"\n\n" + sse.HEARTBEAT) and noted.beat_due == 12.5
    assert happened is None and stream.state is PARKED
    assert stream.gather(window) == (b"", None, None)  # written once


def test_a_lost_task_stream_checks_its_task_at_heartbeats_and_writes_the_ending_found():
    window, stream = Window(512), task_stream()
    fill(window, *[frame_event(str(i), key=9) for i in range(200)])
    assert gather(stream, window)[1] is None
    assert stream.lost and stream.state is PARKED
    body, happened, _ = gather(stream, window, beat_due=1.0)
    assert body == sse.HEARTBEAT and happened is CHECK and stream.state is CHECKING
    working = {**TASK, "status": {"state": states.WORKING, "timestamp": "t"}}
    assert stream.ending_from(working) == (b"", None, None) and not stream.ended
    artifact = events.response_artifact("done", "art_1")
    ended = {**TASK, "status": {"state": states.COMPLETED, "timestamp": "t"}, "artifacts": [artifact]}
    body, happened, noted = stream.ending_from(ended)
    stream.move(happened)
    items = parse(body)
    assert [(event_id, item.kind) for event_id, item in items] == [
        (None, "statusUpdate"), (None, "artifactUpdate"), (None, "statusUpdate")]
    assert items[0][1].frame == {"frame": "lagged", "missed": 200 - LAG_LIMIT}  # what it lost, first
    assert items[1][1].body["artifact"] == artifact and stream.ended
    assert stream.pending_missed == 0 and noted.lagged_frames == 1


def test_the_session_end_writes_capsule_closed_to_watchers_after_the_last_event():
    window, stream, subscriber = Window(512), watcher(), task_stream()
    fill(window, frame_event("a"))
    window.session_closed_at = 3  # one more event is still to come
    assert [event_id for event_id, _ in parse(body_of(stream, window))] == [1] and not stream.ended
    fill(window, frame_event("b"))
    items = parse(body_of(stream, window))
    assert items[0][0] == 2 and items[1][1].frame == {"frame": "capsule-closed"} and stream.ended
    subscriber.cursor = 2
    assert gather(subscriber, window)[:2] == (b"", END) and subscriber.ended  # a task stream just ends


def test_a_new_session_ends_every_stream():
    window, stream = Window(512), task_stream()
    stream.new_session()
    assert gather(stream, window) == (b"", END, None) and stream.ended


def test_a_task_frame_rides_the_last_known_state():
    window, stream = Window(512), task_stream()
    fill(window, status_event(states.INPUT_REQUIRED))
    gather(stream, window)
    (item,) = [item for _, item in parse(stream.connection_frame(events.lagged_frame(3)))]
    assert item.body["status"]["state"] == states.INPUT_REQUIRED and item.frame["missed"] == 3


def big_frames(n: int) -> list[tuple[int, int, bytes]]:
    """`n` text frames of about 300 bytes each, as --sim-load-size 300 writes them."""
    return [frame_event(f"{i:06d} " + "x" * 290) for i in range(n)]


def gather_all(stream: Stream, window: Window, limit: int = 100) -> list[bytes]:
    """Every body the stream writes until it has nothing more, one gather per write."""
    bodies = []
    for _ in range(limit):
        body = body_of(stream, window)
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
    first = parse(body_of(stream, window))
    fill(window, *big_frames(150))  # live, while the replay is still being written
    rest = [item for body in gather_all(stream, window) for item in parse(body)]
    ids = [event_id for event_id, _ in first + rest]
    skipped = 450 - LAG_LIMIT - 300  # the live events beyond the queue of 128
    assert ids == list(range(1, 301)) + [None] + list(range(301 + skipped, 451))
    assert [item.frame for event_id, item in rest if event_id is None] == [{"frame": "lagged", "missed": skipped}]


def replay_then_live(live: int) -> tuple[Stream, list[int], list[tuple[int | None, object]]]:
    """A watcher replaying a full window from 0 writes its first piece, then `live` events
    arrive (overwriting that many of the replay's in the window) before it writes the rest:
    (the stream, the first piece's ids, every item after it)."""
    window, stream = Window(512), watcher()
    fill(window, *big_frames(512))
    stream.start_replay(window, 0)
    first = [event_id for event_id, _ in parse(body_of(stream, window))]
    assert 0 < len(first) < 512
    fill(window, *big_frames(live))
    return stream, first, [item for body in gather_all(stream, window) for item in parse(body)]


def test_a_replay_is_whole_and_exactly_128_live_events_after_the_opening_are_none_lost():
    stream, first, rest = replay_then_live(LAG_LIMIT)
    assert first + [event_id for event_id, _ in rest] == list(range(1, 512 + LAG_LIMIT + 1))
    assert stream.replay is None  # written whole: its view of the buffer is let go


def test_the_129th_live_event_loses_the_oldest_live_one_never_a_replayed_one():
    stream, first, rest = replay_then_live(LAG_LIMIT + 1)
    ids = first + [event_id for event_id, _ in rest]
    assert ids == [*range(1, 513), None, *range(514, 513 + LAG_LIMIT + 1)]
    assert [item.frame for event_id, item in rest if event_id is None] == [{"frame": "lagged", "missed": 1}]


def test_a_replay_is_lapped_once_the_window_no_longer_holds_the_entry_it_owes_next():
    """The lapped-replay rule's condition (stream.py, lapped.py): the view alone keeps the next entry the
    stream owes alive; never for a stream past its replay."""
    window, stream = Window(512), watcher()
    fill(window, *big_frames(512))
    stream.start_replay(window, 0)
    first = [event_id for event_id, _ in parse(body_of(stream, window))]
    owed = first[-1] + 1
    fill(window, *big_frames(owed - 1))  # the window still holds id `owed`
    assert window.entry(owed) is not None and not stream.replay_lapped(window)
    fill(window, *big_frames(1))  # the ring overwrote it
    assert window.entry(owed) is None and stream.replay_lapped(window)
    gather_all(stream, window)
    assert not stream.replaying and not stream.replay_lapped(window)


def test_a_replay_the_ring_overwrote_entirely_is_still_written_whole_then_the_newest_128():
    _, first, rest = replay_then_live(1000)  # ids 513..1512: the whole replay left the window
    ids = first + [event_id for event_id, _ in rest]
    assert ids == [*range(1, 513), None, *range(1512 - LAG_LIMIT + 1, 1513)]
    assert [item.frame["missed"] for event_id, item in rest if event_id is None] == [1000 - LAG_LIMIT]


def test_a_session_that_restarts_mid_replay_ends_the_stream_with_nothing_more_of_either():
    window, stream = Window(512), watcher()
    fill(window, *big_frames(512))
    stream.start_replay(window, 0)
    first = parse(body_of(stream, window))
    window.clear()  # the pump's new session
    stream.new_session()
    fill(window, *big_frames(600))  # the new session's ids, past the old cursor
    body, happened, _ = gather(stream, window)
    assert [item.frame for _, item in parse(body)] == [{"frame": "capsule-closed"}]
    assert happened is END and stream.ended and len(first) < 512


def test_a_task_stream_replays_in_pieces_and_skips_other_tasks():
    window, stream = Window(512), task_stream()
    mine = big_frames(400)
    fill(window, *[event if i % 4 else (9, *event[1:]) for i, event in enumerate(mine)])
    stream.start_replay(window, 0)
    bodies = gather_all(stream, window)
    ids = [event_id for body in bodies for event_id, _ in parse(body)]
    assert len(bodies) > 1 and ids == [i + 1 for i in range(400) if i % 4]


# --- the state table ---

def stream_in(state: State) -> Stream:
    stream = Stream(endpoint=WATCH_SESSION, rpc_id_json=RPC_ID)
    stream.state = state
    return stream


def test_every_move_is_the_tables_and_every_other_is_refused_leaving_the_state():
    for state, happened in itertools.product(State, Happened):
        stream = stream_in(state)
        if happened in TRANSITIONS[state]:
            stream.move(happened)
            assert stream.state is TRANSITIONS[state][happened]
        else:
            with pytest.raises(StreamStateError, match=f"{state.value} cannot be {happened.value}"):
                stream.move(happened)
            assert stream.state is state


def test_the_table_names_every_state_and_what_moves_it_once():
    assert set(TRANSITIONS) == set(State)
    assert {h for moves in TRANSITIONS.values() for h in moves} == set(Happened)
    assert {s for moves in TRANSITIONS.values() for s in moves.values()} == set(State) - {machine.OPENING}


def test_every_state_is_reached_from_the_opening_and_every_one_can_end():
    reached, frontier = {machine.OPENING}, [machine.OPENING]
    while frontier:
        for after in TRANSITIONS[frontier.pop()].values():
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(State)
    for state in State:
        assert TRANSITIONS[state][END] is ENDING  # a stream may be ended in any state, again too
    assert set(TRANSITIONS[ENDING]) == {END}  # and nothing leaves ENDING


def test_every_walk_of_up_to_five_moves_from_the_opening_follows_the_table():
    """Exhaustive: each sequence of what may happen either walks the table or is refused at
    its first move the table lacks, with the stream left where it was."""
    for walk in itertools.product(Happened, repeat=5):
        stream, expected = Stream(endpoint=WATCH_SESSION, rpc_id_json=RPC_ID), machine.OPENING
        for happened in walk:
            after = TRANSITIONS[expected].get(happened)
            if after is None:
                with pytest.raises(StreamStateError):
                    stream.move(happened)
                assert stream.state is expected
                break
            stream.move(happened)
            expected = after
            assert stream.state is expected


def test_a_new_stream_is_opening_and_its_opening_is_taken_once():
    stream = Stream(endpoint=WATCH_SESSION, rpc_id_json=RPC_ID)
    stream.opening = b"ack"
    assert stream.state is machine.OPENING and not stream.ended
    assert stream.take_opening() == b"ack" and stream.take_opening() == b""


# What each step says happened, for each kind of stream: (kind, what the window holds, the
# heartbeat due) -> what `gather` answers. A watcher never checks a task, a task stream that
# lost nothing neither, and a lost one that ends in the same gather ends rather than checks.
def lost(stream: Stream, window: Window) -> Stream:
    fill(window, *[frame_event(str(i), key=9) for i in range(200)])
    gather(stream, window)
    assert stream.lost
    return stream


STEPS = [
    ("watcher, live events", watcher, lambda s, w: fill(w, frame_event("a")), None, None),
    ("watcher, a heartbeat", watcher, lambda s, w: None, 1.0, None),
    ("lost watcher, a heartbeat", watcher, lost, 1.0, None),
    ("task stream, its working status", task_stream, lambda s, w: fill(w, status_event(states.WORKING)), None, None),
    ("task stream, its terminal status", task_stream, lambda s, w: fill(w, status_event(states.FAILED)), None, END),
    ("task stream, a heartbeat", task_stream, lambda s, w: None, 1.0, None),
    ("lost task stream, a heartbeat", task_stream, lost, 1.0, CHECK),
    ("lost task stream, its end and a heartbeat", task_stream,
     lambda s, w: (lost(s, w), fill(w, status_event(states.COMPLETED))), 1.0, END),
    ("watcher, the session closed", watcher, lambda s, w: setattr(w, "session_closed_at", w.head + 1), None, END),
    ("task stream, a new session", task_stream, lambda s, w: s.new_session(), 1.0, END),
]


@pytest.mark.parametrize("name, make, situation, beat_due, expected", STEPS, ids=[s[0] for s in STEPS])
def test_what_a_gather_says_happened(name, make, situation, beat_due, expected):
    window, stream = Window(512), make()
    situation(stream, window)
    body, happened, _ = gather(stream, window, beat_due)
    assert body and happened is expected
    assert stream.state is {None: PARKED, END: ENDING, CHECK: CHECKING}[expected]


@pytest.mark.parametrize("method, state, expected", [
    (SUBSCRIBE_TO_TASK, states.WORKING, None),
    (SUBSCRIBE_TO_TASK, states.INPUT_REQUIRED, None),
    (SUBSCRIBE_TO_TASK, states.CANCELED, END),
    (SEND_STREAMING_MESSAGE, states.INPUT_REQUIRED, END),
    (SEND_STREAMING_MESSAGE, states.COMPLETED, END),
])
def test_what_a_lookup_of_a_lost_task_says_happened(method, state, expected):
    stream = task_stream(method)
    stream.move(CHECK)
    body, happened, _ = stream.ending_from({**TASK, "status": {"state": state, "timestamp": "t"}})
    assert happened is expected and bool(body) == (expected is END)


def test_pass_over_skips_a_parked_task_stream_only_when_no_new_event_is_its_tasks():
    window, stream, watching = Window(512), task_stream(), watcher()
    fill(window, frame_event("x", key=9), frame_event("y", key=11))
    assert stream.pass_over({9, 11}, window.head) and stream.cursor == 2
    assert not any(stream.accepts(window.entry(i)) for i in (1, 2))  # the filter agrees
    fill(window, frame_event("mine"))
    assert not stream.pass_over({TASK_KEY}, window.head) and stream.cursor == 2
    assert not watching.pass_over({9}, window.head)  # a watcher takes every event
