"""A replay under live load (spec "Replay", "Events a connection misses"), over real sockets
against a real one-worker gateway.

An activated watcher opens with Last-Event-ID: 0 on a full ring with a 4 KiB receive buffer
and does not read: with 2 KiB events most of its 1 MiB replay waits in the gateway while the
capsule writes more. Whatever the ring does meanwhile, it then reads the buffer as it was when
its request was read, whole and in order, then the live events, of which it loses only the
oldest beyond the queue of 128, named by one `lagged` frame before the next event it reads.
The counts are exact: the live events are one burst written after the opening, and each wait
is on a condition (the opening answered, a probe reading the burst's end), never a duration.
"""

from __future__ import annotations

import contextlib
import threading

from gateway.protocol.lag import LAG_LIMIT
from gateway.protocol.parser import SSEEvent
from helpers.gateway_harness import running_gateway, wait_for
from helpers.http_client import rpc, user_message
from helpers.sse_reading import WATCH, SSEStream, frame_of, is_terminal_event, item, task_id_of

SIZE = 2048  # a burst frame's text: a replay of 512 is ~1 MiB, far past a 4 KiB reader's buffers
FILL = 600  # the first burst's frames: the ring's 512 slots full
SUB = "SubscribeToTask"
BUDGET = 1_000_000  # --max-lapped-replay-bytes: half what one lapped view of 512 such events holds


def burst(port: int, frames: int, **options) -> tuple[str, int]:
    """Start a burst task of `frames` padded frames; (its id, the newest id once it ended, as a
    probe reading it from the buffer saw it)."""
    words = " ".join(f"{key}={value}" for key, value in options.items())
    status, _, answer = rpc(port, "SendMessage", user_message(f"/scenario burst n={frames} size={SIZE} {words}"))
    assert status == 200, answer
    task_id = answer["result"]["task"]["id"]
    return task_id, ended(port, task_id)


def ended(port: int, task_id: str) -> int:
    """The id of the task's terminal status, read by a probe replaying the buffer."""
    with SSEStream(port, WATCH, last_event_id="0", timeout=60) as probe:
        seen = probe.read_until(lambda e: e.id is not None and task_id_of(e) == task_id and is_terminal_event(e),
                                within=60)
    return seen[-1].id


def read_to(stream: SSEStream, last: int) -> tuple[list[int], list[tuple[str, int | None]], list[object]]:
    """What `stream` writes up to id `last`: the ids, its frames (name, missed or
    firstAvailableId) and the order of both (ids and frame names)."""
    ids, frames, order = [], [], []
    while not ids or ids[-1] < last:
        event: SSEEvent | None = stream.next()
        assert event is not None, f"the stream ended after {ids[-1:]}"
        if event.id is not None:
            ids.append(event.id)
            order.append(event.id)
        elif event.data is not None:
            frame = frame_of(event.data)
            frames.append((frame["frame"], frame.get("missed", frame.get("firstAvailableId"))))
            order.append(frame["frame"])
    return ids, frames, order


def watch_while_live(live: int) -> tuple[int, int, list[int], list, list]:
    """A full ring, a stalled watcher replaying it, `live` events more, then the watcher reads:
    (the first id it replays, the newest id at its opening, ids, frames, order)."""
    with running_gateway(workers=1) as gateway:
        _, opened_at = burst(gateway.port, FILL)
        overhead = opened_at - FILL  # a burst task's events besides its frames (its statuses)
        with SSEStream(gateway.port, WATCH, {}, rcvbuf=4096, last_event_id="0", activate=True,
                       timeout=60) as stalled:
            assert stalled.status == 200
            _, newest = burst(gateway.port, live - overhead)  # written while its replay waits
            assert newest - opened_at == live
            ids, frames, order = read_to(stalled, newest)
    return opened_at - 511, opened_at, ids, frames, order


def test_a_replay_is_whole_while_fewer_than_128_live_events_arrived():
    oldest, opened_at, ids, frames, order = watch_while_live(100)
    assert frames[0] == ("connection-ack", None) and frames[1] == ("gap", oldest)
    assert ids == list(range(oldest, opened_at + 101))  # the 512 replayed, then the 100 live
    assert [name for name, _ in frames].count("lagged") == 0


def test_past_128_live_events_only_the_oldest_live_ones_are_lost_and_named():
    oldest, opened_at, ids, frames, order = watch_while_live(200)
    newest = opened_at + 200
    assert frames[1] == ("gap", oldest)
    assert ids == [*range(oldest, opened_at + 1), *range(newest - LAG_LIMIT + 1, newest + 1)]
    assert [frame for frame in frames if frame[0] == "lagged"] == [("lagged", 200 - LAG_LIMIT)]
    lagged_at = order.index("lagged")
    assert order[lagged_at - 1] == opened_at and order[lagged_at + 1] == newest - LAG_LIMIT + 1


def test_a_task_streams_replay_is_whole_and_it_still_ends_at_its_terminal_status():
    """SubscribeToTask with Last-Event-ID: 0 on a ring full of its task's events, stalled while
    the task writes on until it is canceled: the task's replay whole (the ring held only its
    events: 512 ids in a row), then its live events, the oldest beyond 128 named lost, and
    the stream ends at its terminal status ("Events a connection misses" unchanged)."""
    with running_gateway(workers=1) as gateway:
        status, _, answer = rpc(gateway.port, "SendMessage",
                                user_message(f"/scenario burst n=1000000 size={SIZE} pause=0.05"))
        assert status == 200, answer
        task_id = answer["result"]["task"]["id"]
        with SSEStream(gateway.port, WATCH, last_event_id="0", timeout=60) as probe:
            full = probe.read_until(lambda e: e.id is not None and e.id > 600, within=60)[-1].id  # the ring is full
        with SSEStream(gateway.port, SUB, {"id": task_id}, rcvbuf=4096, last_event_id="0", activate=True,
                       timeout=60) as stalled:
            assert stalled.status == 200
            with SSEStream(gateway.port, WATCH, last_event_id=str(full), timeout=60) as probe:
                # past the queue of 128, and past what its buffers took of the replay
                probe.read_until(lambda e: e.id is not None and e.id > full + 300, within=60)
            status, _, answer = rpc(gateway.port, "CancelTask", {"id": task_id})
            assert status == 200, answer
            newest = ended(gateway.port, task_id)
            events = list(stalled.events())
    assert stalled.ended and is_terminal_event(events[-1])  # its ending rule
    # A stream that lost events looks its task up at each heartbeat it writes, and ends with
    # the status found there, unnumbered, if that comes before its cursor reaches the ring's
    # (spec "Events a connection misses"): which comes first is the scheduler's to decide.
    looked_up = events[-1].id is None
    kinds = [event.id if event.id is not None else item(event).frame for event in events[1:len(events) - looked_up]]
    assert events[0].id is None and item(events[0]).kind == "task"  # its opening
    assert kinds[0]["frame"] == "gap"
    first = kinds[0]["firstAvailableId"]
    assert kinds[1:513] == list(range(first, first + 512))  # the buffer at its opening, whole
    live = kinds[513:]
    if looked_up:  # it lost events (only then does it ask), and took the ring's in order up to its ending
        ids = [kind for kind in live if isinstance(kind, int)]
        assert any(isinstance(kind, dict) and kind["frame"] == "lagged" for kind in live), live
        assert all(isinstance(kind, int) or kind["frame"] == "lagged" for kind in live), live
        assert ids == sorted(set(ids)) and all(first + 512 <= id_ < newest for id_ in ids)
    elif live and isinstance(live[0], dict):  # more than 128 live events came while it stalled
        assert events[-1].id == newest
        assert live[0] == {"frame": "lagged", "missed": newest - LAG_LIMIT - (first + 511)}
        assert live[1:] == list(range(newest - LAG_LIMIT + 1, newest + 1))
    else:
        assert events[-1].id == newest
        assert live == list(range(first + 512, newest + 1))


def test_a_lapped_replay_past_the_budget_is_cut_off_and_a_reader_beside_it_is_not():
    """[claim: lapped-replay] A watcher opened with Last-Event-ID: 0 on a full ring, with a
    4 KiB receive buffer, reads nothing while the capsule writes 1000 events more: the ring
    laps its replay's view, which holds ~2 MB, past a budget of 1 MB, so the gateway cuts its
    connection (the socket ends, EOF or reset) and logs its end with reason "lapped", its
    replay unfinished. A watcher opened beside it (sharing its view) that reads throughout is
    never lapped and gets every event, its replay then the live ones, none lost."""
    with running_gateway("--max-lapped-replay-bytes", str(BUDGET), workers=1) as gateway:
        _, opened_at = burst(gateway.port, FILL)
        oldest = opened_at - 511
        with SSEStream(gateway.port, WATCH, {}, last_event_id="0", activate=True, timeout=60) as reading, \
                SSEStream(gateway.port, WATCH, {}, rcvbuf=4096, last_event_id="0", activate=True,
                          timeout=60) as stalled:
            assert (reading.status, stalled.status) == (200, 200)
            ids, frames, _ = read_to(reading, opened_at)  # its replay, read before the live events
            newest: list[int] = []
            more = threading.Thread(target=lambda: newest.append(burst(gateway.port, 1000, pause=0.25)[1]))
            more.start()
            try:  # it reads as the burst is written, up to the burst's terminal status
                live = reading.read_until(lambda e: e.id is not None and e.id > opened_at and is_terminal_event(e),
                                          within=120)
            finally:
                more.join()
            cut = wait_for(lambda: next((r for r in gateway.logs() if r.get("event") == "stream end"
                                         and r.get("reason") == "lapped"), None), 60, "the lapped line")
            assert cut["events"] < 512  # cut mid-replay
            stalled.http.sock.settimeout(60)
            with contextlib.suppress(ConnectionResetError):
                while stalled.http.sock.recv(65536):  # what it had in flight, then the end
                    pass
            reasons = [r["reason"] for r in gateway.logs() if r.get("event") == "stream end"]
    assert reasons.count("lapped") == 1  # the reading watcher and the probes were not cut
    assert frames == [("connection-ack", None), ("gap", oldest)]
    assert [event.id for event in live] == list(range(opened_at + 1, newest[0] + 1))  # no frame: none lost
    assert ids == list(range(oldest, opened_at + 1))
