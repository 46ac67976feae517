"""The lapped-replay budget's choice (gateway/worker/delivery/lapped.py) over real windows and
streams: which streams end when what lapped views keep alive beyond the window passes the budget.
Pure: no process, no socket."""

from __future__ import annotations

import orjson
import pytest

from gateway.common import records
from gateway.protocol import events, states
from gateway.protocol.activation import WATCH_SESSION
from gateway.worker.delivery.drivers import Served
from gateway.worker.delivery.lapped import over_budget
from gateway.worker.delivery.stream import OPENED, Stream
from gateway.worker.delivery.window import Window

pytestmark = pytest.mark.unit

SLOTS = 512


def write(window: Window, n: int) -> None:
    """`n` text frames of about 1 KB after the head, as the pump copies them."""
    for _ in range(n):
        event_id = window.head + 1
        frame = events.task_frame_event("tsk_a", "ctx_a", events.text_frame("x" * 1000, False),
                                        state=states.WORKING, ts="t")
        window.put(event_id, 7, records.make_meta(states.WORKING, records.FRAME), orjson.dumps(frame))
        window.head = event_id


def replayer(window: Window, read: int = 0) -> Served:
    """A watcher opened now with Last-Event-ID: 0, having written `read` events of its replay."""
    stream = Stream(endpoint=WATCH_SESSION, rpc_id_json=b"1")
    stream.move(OPENED)
    stream.start_replay(window, 0)
    stream.cursor += read
    return Served(stream)


def view_bytes(window: Window) -> int:
    """What one view of a full window holds: its 512 entries' sizes."""
    return sum(entry.size for entry in window.entries)


def held(*opened: Served) -> int:
    """What the views of `opened` hold, each counted once (none shares an entry here)."""
    return sum(entry.size for view in {served.stream.replay for served in opened} for entry in view.entries)


def laps(n: int) -> tuple[Window, list[Served], int]:
    """`n` replayers opened a lap apart, none reading: every one of them lapped by the next lap."""
    window = Window(SLOTS)
    write(window, SLOTS)
    one_view = view_bytes(window)
    opened = []
    for _ in range(n):
        opened.append(replayer(window))
        write(window, SLOTS)
    return window, opened, one_view


def test_past_the_budget_the_oldest_lapped_views_end_and_the_newest_that_fit_stay():
    """[claim: lapped-replay] Six replayers opened a lap apart, each view lapped and wholly
    beyond the window: with room for two views, the four oldest end, the two newest stay."""
    window, opened, _ = laps(6)
    assert all(served.stream.replay_lapped(window) for served in opened)
    assert sorted(over_budget(opened, window, held(*opened[4:])), key=opened.index) == opened[:4]
    assert over_budget(opened, window, held(*opened)) == []  # the budget holds: none ends
    assert len(over_budget(opened, window, held(opened[5]) - 1)) == 6  # no view fits: all end


def test_a_view_shared_by_many_streams_is_counted_once():
    window = Window(SLOTS)
    write(window, SLOTS)
    one_view = view_bytes(window)
    opened = [replayer(window) for _ in range(100)]
    write(window, SLOTS)
    assert over_budget(opened, window, one_view) == []
    assert over_budget(opened, window, one_view - 1) == opened


def test_a_reader_the_ring_has_not_lapped_is_never_chosen_however_slow():
    """It owes an entry the window still holds: not lapped, even with a budget of 0 bytes and
    its view holding entries the window let go."""
    window = Window(SLOTS)
    write(window, SLOTS)
    slow = replayer(window, read=300)
    write(window, 200)  # its next entry, id 301, is still the window's
    assert not slow.stream.replay_lapped(window)
    assert over_budget([slow], window, 0) == []
    write(window, 101)  # now it is not
    assert slow.stream.replay_lapped(window) and over_budget([slow], window, 0) == [slow]


def test_a_stream_already_ended_and_a_replay_written_whole_are_not_chosen():
    window, opened, _ = laps(2)
    opened[0].ended_by = "lapped"
    opened[1].stream.replay = None
    assert over_budget(opened, window, 0) == []


def test_an_entry_counts_its_cached_joins():
    window = Window(SLOTS)
    write(window, 1)
    entry = window.entry(1)
    before = entry.size
    joined = entry.wire(b'{"jsonrpc":"2.0","id":1,"result":', False)
    assert entry.size >= before + len(joined)
