"""A murgw.WatchOwnTasks stream's filter, in-process (gateway/worker/delivery/stream.py and
gateway/common/records.py): it takes the events whose record names its owner code, and those
of no task, live and replayed; it never shares a watcher's batch; a pass passes over it when
no new event is its owner's; the lag rule is a watcher's.
The sequencer's side: each owner name has one code, 0 for no owner."""

from __future__ import annotations

import orjson
import pytest

from gateway.common import records
from gateway.protocol import events, states
from gateway.protocol.activation import WATCH_OWN_TASKS, WATCH_SESSION
from gateway.protocol.lag import LAG_LIMIT
from gateway.protocol.parser import SSEParser
from gateway.sequencer.capsule.tasks import Registry
from gateway.worker.delivery.stream import OPENED, Stream
from gateway.worker.delivery.window import Window

pytestmark = pytest.mark.unit

ALICE, BOB = 3, 4  # owner codes


def event(key: int, owner: int) -> tuple[int, int, bytes]:
    result = events.task_frame_event(f"tsk_{key}", "ctx", events.text_frame("x", False), state=states.WORKING, ts="t")
    return key, records.owned(records.make_meta(states.WORKING, records.FRAME), owner), orjson.dumps(result)


def fill(window: Window, *recs: tuple[int, int, bytes]) -> None:
    for key, meta, data in recs:
        window.head += 1
        window.put(window.head, key, meta, data)


def stream(owner: int | None, **kw) -> Stream:
    opened = Stream(endpoint=WATCH_OWN_TASKS if owner is not None else WATCH_SESSION, rpc_id_json=b"1",
                    owner=owner, **kw)
    opened.move(OPENED)
    return opened


def ids(body: bytes) -> list[int]:
    return [int(e.id) for e in SSEParser().feed(body) if e.id is not None]


def test_the_owner_code_rides_above_the_state_and_flags():
    meta = records.owned(records.status_meta(states.COMPLETED), 2**32 - 1)
    assert records.meta_owner(meta) == 2**32 - 1 and records.meta_state(meta) == states.COMPLETED
    assert meta & records.TERMINAL and records.meta_owner(records.status_meta(states.WORKING)) == 0


def test_it_takes_its_owners_events_and_those_of_no_task_only():
    window = Window(512)
    fill(window, event(1, ALICE), event(2, BOB), event(0, 0), event(1, ALICE), event(5, 0))
    assert ids(stream(ALICE).gather(window)[0]) == [1, 3, 4]
    assert ids(stream(None).gather(window)[0]) == [1, 2, 3, 4, 5]


def test_its_replay_is_filtered_the_same_way():
    window = Window(512)
    fill(window, event(1, ALICE), event(2, BOB), event(1, ALICE))
    replaying = stream(ALICE)
    replaying.start_replay(window, 0)
    fill(window, event(2, BOB), event(1, ALICE))
    body = b"".join(replaying.gather(window)[0] for _ in range(3))
    assert ids(body) == [1, 3, 5]


def test_it_never_takes_a_shared_batch():
    window = Window(512)
    fill(window, event(1, ALICE), event(2, BOB))
    stream(None).gather(window)
    stream(ALICE).gather(window)
    assert window.taken() == [(2, 2, 1)]  # the plain watcher's alone


def test_the_lag_rule_is_a_watchers_and_counts_every_event_it_skipped():
    window = Window(512)
    fill(window, *[event(2, BOB) for _ in range(200)], *[event(1, ALICE) for _ in range(10)])
    body, _, noted = stream(ALICE).gather(window)
    frames = [orjson.loads(e.data)["result"] for e in SSEParser().feed(body) if e.id is None]
    assert len(frames) == 1 and noted.missed == 210 - LAG_LIMIT
    assert ids(body) == list(range(201, 211))


def test_a_pass_passes_over_it_only_when_no_new_event_is_its_owners_or_of_no_task():
    keys_of = [{1, records.owner_tag(BOB)}, {1, records.owner_tag(ALICE)}, {0, records.owner_tag(0)}]
    answers = []
    for keys in keys_of:
        parked = stream(ALICE)
        answers.append((parked.pass_over(keys, 9), parked.cursor))
    assert answers == [(True, 9), (False, 0), (False, 0)]
    assert not stream(None).pass_over({1, records.owner_tag(BOB)}, 9)  # a plain watcher is always written
    assert records.owner_tag(0) < 0 and records.owner_tag(ALICE) != records.owner_tag(BOB)


def test_one_code_per_owner_name_and_none_for_no_owner():
    registry = Registry()
    assert registry.owner_code(None) == 0
    alice, bob = registry.owner_code("alice"), registry.owner_code("bob")
    assert 0 < alice != bob and registry.owner_code("alice") == alice
    assert registry.create("alice").owner_code == alice and registry.create(None).owner_code == 0
