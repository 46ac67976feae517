"""gateway/worker/delivery/hub.py in-process over a real ring and fake sinks: the pass writes a parked
stream through its sink with no coroutine switch, a blocked sink is not written until it pokes
its stream (drained), the stream ends as its rules say, and every delivery metric is counted
once per pass."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from collections import Counter

import orjson
import pytest

from gateway import tuning
from gateway.common import board
from gateway.common import records
from gateway.common.control import Op
from gateway.protocol import events, sse, states
from gateway.protocol.activation import SUBSCRIBE_TO_TASK, WATCH_SESSION
from gateway.protocol.lag import LAG_LIMIT
from gateway.protocol.parser import SSEParser, read_stream_response
from gateway.worker.delivery import coalesce, pump
from gateway.worker.delivery.drivers import DRAIN, PARK, Served
from gateway.worker.delivery.hub import Hub
from gateway.worker.delivery.stream import Stream, TaskView
from gateway.worker.delivery.window import PIECE_BYTES
from helpers.loop_turns import until
from shm import Ring

pytestmark = pytest.mark.unit

TASK_KEY = 5
TASK = {"id": "tsk_h", "contextId": "ctx_h", "status": {"state": states.WORKING, "timestamp": "t"}}
_names = itertools.count()


class FakeSink:
    """A sink that keeps what it is given; `block` makes writes answer blocked until `drained`
    (a transport past its high-water mark); `always_blocks`, every write, drained on the loop's
    next turn (the ASGI sink, whose send returns later)."""

    def __init__(self, always_blocks: bool = False):
        self.writes: list[bytes] = []
        self.always_blocks = always_blocks
        self.block = False
        self.pending = False
        self.ended = self.released = self.closed = self.aborted = False
        self._listener = None

    @property
    def blocked(self) -> bool:
        return self.pending

    def write(self, body: bytes) -> bool:
        assert not self.pending, "written while blocked"
        self.writes.append(body)
        self.pending = self.always_blocks or self.block
        if self.always_blocks:
            asyncio.get_running_loop().call_soon(self.drained)
        return not self.pending and not self.closed

    def drained(self) -> None:
        """Its bytes left: it pokes its stream, as a sink does."""
        self.pending = False
        self._listener.poke()

    def end_now(self) -> None:
        self.ended = True

    def abort(self) -> None:
        self.aborted = self.closed = True
        self._listener.poke()

    def on_disconnect(self, listener) -> None:
        self._listener = listener

    def leave(self) -> None:
        self.closed = True
        self._listener.poke()

    def release(self) -> None:
        self.released = True

    def ids(self) -> list[int | None]:
        return [None if e.id is None else int(e.id) for e in SSEParser().feed(b"".join(self.writes))]

    def items(self) -> list[tuple[int | None, object]]:
        """(event id, StreamResponse item) of each event written, heartbeats left out."""
        return [(None if e.id is None else int(e.id), read_stream_response(e.data.encode())[1])
                for e in SSEParser().feed(b"".join(self.writes)) if e.data is not None]


class FakeCounters:
    def __init__(self):
        self.calls: list[tuple] = []

    def add(self, name, n=1, label=""):
        self.calls.append(("add", name, n, label))

    def sub(self, name, n=1, label=""):
        self.calls.append(("sub", name, n, label))

    def observe(self, name, value, label="", times=1):
        self.calls.append(("observe", name, value, label, times))

    def adds(self, name: str) -> list[tuple]:
        return [c[2:] for c in self.calls if c[0] == "add" and c[1] == name]

    def total(self, name: str) -> Counter:
        totals = Counter()
        for op, metric, n, label, *_ in self.calls:
            if metric == name:
                totals[label] += n if op == "add" else -n
        return totals


class FakeControl:
    def __init__(self, snapshot: dict):
        self.snapshot, self.asked = snapshot, []

    async def call(self, op, **params):
        self.asked.append((op, params))
        return {"task": self.snapshot, "key": TASK_KEY}


@pytest.fixture
def ring():
    """A memfd ring (no file in /dev/shm), so even a test process killed mid-test leaves nothing."""
    ring = Ring.create(f"murgw-{os.getpid()}-hubtest-{next(_names)}", control_words=board.CONTROL_WORDS,
                       anonymous=True)
    try:
        yield ring
    finally:
        ring.close()


class Bench:
    """A hub over `ring`, and helpers to write events into the ring as the sequencer does."""

    def __init__(self, ring: Ring, interval: float = 300.0, snapshot: dict = TASK):
        self.ring = ring
        self.sequencer_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.counters = FakeCounters()
        self.control = FakeControl(snapshot)
        self.hub = Hub(ring, worker_end, 0, interval, self.counters, self.control)
        self.reasons: dict[Served, str | None] = {}  # why each stream ended, as the hub tells the app
        self.ends: dict[Served, asyncio.Future] = {}  # each resolved when the hub tells the app
        self.hub.on_end = self._ended
        self.socks = (self.sequencer_end, worker_end)
        self.next_id = 1

    def write(self, key: int, meta: int, result: dict, times: int = 1) -> None:
        for _ in range(times):
            self.ring.append(self.next_id, key, meta, orjson.dumps(result))
            self.next_id += 1

    def frames(self, n: int, key: int = TASK_KEY, text: str = "x") -> None:
        result = events.task_frame_event("tsk_h", "ctx_h", events.text_frame(text, False), ts="t")
        self.write(key, records.make_meta(states.WORKING, records.FRAME), result, n)

    def status(self, state: str) -> None:
        self.write(TASK_KEY, records.status_meta(state),
                   events.status_update("tsk_h", "ctx_h", {"state": state, "timestamp": "t"}))

    def _ended(self, served: Served, reason: str | None) -> None:
        self.reasons[served] = reason
        self.ends[served].set_result(None)

    async def watching(self, sinks: list[FakeSink]) -> list[FakeSink]:
        """A watcher's stream served on each of `sinks`."""
        for sink in sinks:
            await self.open(watcher(), sink)
        return sinks

    async def open(self, served: Served, sink: FakeSink) -> asyncio.Future:
        """Serve the stream; the future its end resolves. The hub's serve returns once the
        stream waits (parked, on its sink or on a lookup)."""
        ended = self.ends[served] = asyncio.get_running_loop().create_future()
        self.hub.serve(served, sink)
        assert served.waiting is not None or ended.done()
        return ended

    def close(self) -> None:
        self.hub.stop()
        for sock in self.socks:
            sock.close()


def watcher() -> Served:
    return Served(Stream(endpoint=WATCH_SESSION, rpc_id_json=b"1"))


def subscriber(activated: bool = True) -> Served:
    return Served(Stream(endpoint=SUBSCRIBE_TO_TASK, rpc_id_json=b"1", activated=activated,
                         task=TaskView(TASK, TASK_KEY, ends_on_input=False)))


def run(ring: Ring, scenario, runner=asyncio.run, **bench_args):
    async def main():
        bench = Bench(ring, **bench_args)
        bench.hub.start()
        try:
            return await scenario(bench)
        finally:
            bench.close()
    return runner(main())


def test_wake_ups_during_a_burst_under_uvloop_share_one_pass(ring):
    """The workers run uvloop, whose call_later(0, ...) is a plain Handle with no when(): a
    second wake-up while a pass is due at once (a burst) must find that pass, not raise."""
    import uvloop

    async def scenario(bench: Bench):
        sink, stream = FakeSink(), watcher()
        await bench.open(stream, sink)
        bench.frames(40)  # more waiting than COALESCE_MAX_EVENTS: the pass is due at once
        bench.hub.pump._on_wake()
        bench.hub.pump._on_wake()
        for _ in range(10):
            await asyncio.sleep(0)
        assert sink.ids() == list(range(1, 41))
        bench.hub.close_all()
    run(ring, scenario, runner=uvloop.run)


def test_the_pass_writes_parked_streams_itself_and_counts_a_shared_batch_once(ring):
    async def scenario(bench: Bench):
        sinks = [FakeSink() for _ in range(3)]
        streams = [watcher() for _ in sinks]
        for stream, sink in zip(streams, sinks):
            await bench.open(stream, sink)
        bench.frames(4)
        bench.hub.sync()
        # written in the pass: no stream's driver was resumed for it
        assert all(sink.ids() == [1, 2, 3, 4] for sink in sinks)
        assert all(stream.waiting is PARK for stream in streams)
        await asyncio.sleep(0)  # the turn's sends are counted once it is over, one add for them all
        assert bench.counters.adds("sends") == [(3, WATCH_SESSION)]
        assert bench.counters.adds("events_delivered") == [(12, WATCH_SESSION)]
        assert [c for c in bench.counters.calls if c[:2] == ("observe", "reader_lag_events")] == [
            ("observe", "reader_lag_events", 4, WATCH_SESSION, 3)]
        bench.hub.close_all()
    run(ring, scenario)


def test_a_short_pass_is_written_whole(ring, monkeypatch):
    monkeypatch.setattr(tuning, "PASS_SLICE_SECONDS", 0.0)
    monkeypatch.setattr(tuning, "PASS_WHOLE_STREAMS", 5)

    async def scenario(bench: Bench):
        sinks = await bench.watching([FakeSink() for _ in range(5)])
        bench.frames(1)
        bench.hub.sync()
        assert [sink.ids() for sink in sinks] == [[1]] * 5  # all five in this turn, however short a slice
        bench.hub.close_all()
    run(ring, scenario)


def test_a_long_pass_writes_for_a_bounded_time_a_turn_and_the_rest_on_the_next(ring, monkeypatch):
    monkeypatch.setattr(tuning, "PASS_SLICE_SECONDS", 0.0)  # a slice of one stream, at least one
    monkeypatch.setattr(tuning, "PASS_WHOLE_STREAMS", 0)

    async def scenario(bench: Bench):
        sinks = await bench.watching([FakeSink() for _ in range(5)])
        bench.frames(1)
        bench.hub.sync()
        assert sorted(len(sink.writes) for sink in sinks) == [0, 0, 0, 0, 1]  # this turn's one
        bench.frames(1)
        bench.hub.sync()  # a second pass while the first is not done: its streams wait behind
        await until(lambda: all(sink.ids() == [1, 2] for sink in sinks))
        assert not bench.hub._line
        bench.hub.close_all()
    run(ring, scenario)


class SlowSink(FakeSink):
    """A sink whose every write holds the loop for `seconds`, as a write to a socket does."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def write(self, body: bytes) -> bool:
        until_ = time.perf_counter() + self.seconds
        while time.perf_counter() < until_:
            pass
        return super().write(body)


def test_the_coalescing_is_told_every_slice_of_a_pass_not_the_first_alone(ring, monkeypatch):
    """A pass written a stream a turn, each write at least 2 ms: the syncs that follow tell the
    coalescing (coalesce.py) every slice's time, at least 10 ms in all, not the first slice's
    alone (2 ms), which would make a pass over many streams look light and never coalesce.
    Summed over every sync (a wake-up or a poll may come between the slices), so what the box
    does meanwhile changes how it is split, never the total; the delay the policy then picks
    depends on the box, the time it is told does not (each write spins 2 ms of wall time)."""
    monkeypatch.setattr(tuning, "PASS_SLICE_SECONDS", 0.0)
    monkeypatch.setattr(tuning, "PASS_WHOLE_STREAMS", 0)
    told: list[float] = []

    def noting(pass_seconds: float, *rest) -> float:
        told.append(pass_seconds)
        return coalesce.next_delay(pass_seconds, *rest)

    monkeypatch.setattr(pump, "next_delay", noting)

    async def scenario(bench: Bench):
        await bench.watching([SlowSink(0.002) for _ in range(5)])
        bench.frames(1)
        told.clear()
        bench.hub.sync()  # the pass: its first slice now, four on the next turns
        await until(lambda: not bench.hub._line)
        bench.hub.sync()  # nothing new: it tells what the later slices took
        assert sum(told) >= 5 * 0.002
        bench.hub.close_all()
    run(ring, scenario)


def test_a_revoked_stream_whose_reader_stopped_is_cut_off_a_heartbeat_later(ring):
    """A reload ends a revoked stream after its whole events; one whose reader stopped reading
    waits for its sink to drain, so a heartbeat interval later its connection is cut, not left to hold
    its place for as long as the reader sleeps. One that can still write ends at once."""
    async def scenario(bench: Bench):
        blocked_sink, blocked = FakeSink(), watcher()
        free_sink, free = FakeSink(), watcher()
        blocked_task, free_task = await bench.open(blocked, blocked_sink), await bench.open(free, free_sink)
        blocked_sink.block = True
        bench.frames(2)
        bench.hub.sync()
        await asyncio.sleep(0)
        assert blocked.waiting is DRAIN and free_sink.ids() == [1, 2]
        bench.hub.end_stream(blocked)
        bench.hub.end_stream(free)
        await free_task
        assert bench.reasons[free] == "revoked" and free_sink.ended and not free_sink.aborted
        assert not blocked_task.done()  # still waiting on its sink: the interval has not passed
        await asyncio.wait_for(blocked_task, 5)
        assert bench.reasons[blocked] == "revoked"
        assert blocked_sink.aborted and blocked_sink.ids() == [1, 2] and not blocked_sink.ended
    run(ring, scenario, interval=0.2)


def test_a_blocked_sink_is_not_written_until_it_pokes_its_stream(ring):
    async def scenario(bench: Bench):
        sink, stream = FakeSink(), watcher()
        task = await bench.open(stream, sink)
        sink.block = True
        bench.frames(2)
        bench.hub.sync()
        assert sink.ids() == [1, 2] and stream.waiting is None  # its driver resumed, on the next turn
        await asyncio.sleep(0)
        assert stream.waiting is DRAIN
        sink.block = False
        bench.frames(3)
        bench.hub.sync()  # the stream waits on its sink: the pass leaves it alone
        assert sink.ids() == [1, 2]
        sink.drained()
        for _ in range(10):
            await asyncio.sleep(0)
        assert sink.ids() == [1, 2, 3, 4, 5]  # its driver wrote what came meanwhile
        assert stream.waiting is PARK  # parked again
        bench.hub.close_all()
        await task
        assert sink.ended and sink.released
    run(ring, scenario)


def test_a_sink_that_always_blocks_gets_the_same_bytes(ring):
    async def scenario(bench: Bench):
        direct, asgi = FakeSink(), FakeSink(always_blocks=True)
        for sink in (direct, asgi):
            await bench.open(watcher(), sink)
        for n in (3, 1, 2):
            bench.frames(n)
            bench.hub.sync()
            for _ in range(5):
                await asyncio.sleep(0)
        assert b"".join(asgi.writes) == b"".join(direct.writes) and direct.ids() == [1, 2, 3, 4, 5, 6]
        bench.hub.close_all()
    run(ring, scenario)


def test_a_client_that_leaves_ends_its_stream_without_an_end(ring):
    async def scenario(bench: Bench):
        sink, stream = FakeSink(), watcher()
        task = await bench.open(stream, sink)
        assert bench.counters.total("connections_open")[WATCH_SESSION] == 1
        sink.leave()
        await task
        assert not sink.ended and sink.released and stream.sink is None
        assert bench.counters.total("connections_open")[WATCH_SESSION] == 0
        assert not bench.hub.watchers and not bench.hub.all_streams()
    run(ring, scenario)


def test_a_write_that_finds_the_client_gone_ends_the_stream_at_once(ring):
    async def scenario(bench: Bench):
        sink, stream = FakeSink(), watcher()
        task = await bench.open(stream, sink)
        original = sink.write

        def write_then_reset(body: bytes) -> bool:
            sink.closed = True  # what a reset answering the write does to a transport
            return original(body)
        sink.write = write_then_reset
        bench.frames(1)
        bench.hub.sync()
        await asyncio.wait_for(task, 10)  # no further write or heartbeat needed
        assert sink.ids() == [1] and not sink.ended and not bench.hub.all_streams()
    run(ring, scenario)


def test_a_task_stream_ends_with_its_task_and_ignores_other_tasks(ring):
    async def scenario(bench: Bench):
        sink, stream = FakeSink(), subscriber()
        task = await bench.open(stream, sink)
        bench.frames(3, key=99)
        bench.hub.sync()
        assert sink.writes == [] and stream.stream.cursor == 3  # others' events: not behind
        bench.frames(1)
        bench.status(states.COMPLETED)
        bench.frames(1)
        bench.hub.sync()
        await task
        assert sink.ids() == [4, 5] and sink.ended
        assert bench.counters.adds("events_delivered") == [(2, SUBSCRIBE_TO_TASK)]
    run(ring, scenario)


def test_a_lost_task_stream_asks_for_its_task_at_a_heartbeat_and_ends_as_found(ring):
    artifact = events.response_artifact("done", "art_1")
    ended = {**TASK, "status": {"state": states.COMPLETED, "timestamp": "t"}, "artifacts": [artifact]}

    async def scenario(bench: Bench):
        sink, stream = FakeSink(), subscriber()
        task = await bench.open(stream, sink)
        bench.frames(200)  # past the lag limit: it loses 72, and its ending may be among them
        bench.hub.sync()
        assert len(sink.ids()) == 1 + 128 and stream.stream.lost
        await asyncio.wait_for(task, 10)  # the next heartbeat looks the task up
        assert bench.control.asked == [(Op.GET, {"id": "tsk_h", "owner": None, "sees_all": True})]
        body = b"".join(sink.writes[1:])
        assert body.startswith(b":heartbeat\n\n") and b'"artifactUpdate"' in body
        assert body.endswith(b'"state":"TASK_STATE_COMPLETED","timestamp":"t"}}}}\n\n') and sink.ended
        assert bench.counters.adds("heartbeats") == [(1, "")]
    run(ring, scenario, interval=0.05, snapshot=ended)


def test_the_session_end_reaches_every_stream(ring):
    async def scenario(bench: Bench):
        sinks = [FakeSink(), FakeSink()]
        tasks = [await bench.open(watcher(), sinks[0]), await bench.open(subscriber(), sinks[1])]
        bench.frames(2)
        ring.control[board.SESSION_CLOSED] = bench.next_id
        bench.hub.sync()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert sinks[0].ids() == [1, 2, None] and b'"capsule-closed"' in sinks[0].writes[-1]
        assert sinks[1].ids() == [1, 2] and all(sink.ended for sink in sinks)
    run(ring, scenario)


PAD = "x" * 300  # about --sim-load-size 300


class Turns:
    """Counts the event loop's turns: a callback that runs once per turn (call_soon'd anew)."""

    def __init__(self):
        self.count = 0
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


class TurnSink(FakeSink):
    """A fake sink that notes the loop turn of each write."""

    def __init__(self, turns: Turns):
        super().__init__()
        self.turns, self.write_turns = turns, []

    def write(self, body: bytes) -> bool:
        self.write_turns.append(self.turns.count)
        return super().write(body)


async def open_replaying(bench: Bench, sink: FakeSink, after: int = 0) -> Served:
    """A watcher whose request was read now, with Last-Event-ID `after` (as opening.py opens it)."""
    served = bench.hub.open_stream(since=bench.hub.reading_point(), replay_after=after,
                                   endpoint=WATCH_SESSION, rpc_id_json=b"1")
    await bench.open(served, sink)
    return served


async def blocked_mid_replay(bench: Bench) -> tuple[Served, FakeSink]:
    """A full ring's replay whose first piece filled the transport: it waits for the drain."""
    bench.frames(512, text=PAD)
    sink = FakeSink()
    sink.block = True
    stream = await open_replaying(bench, sink)
    await until(lambda: stream.waiting is DRAIN)
    return stream, sink


async def queued_full_replay(bench: Bench) -> tuple[Served, FakeSink]:
    """A full ring's replay just opened: its first piece waits for the catch-up run."""
    bench.frames(512, text=PAD)
    sink = FakeSink()
    stream = await open_replaying(bench, sink)
    assert stream.queued and sink.writes == []
    return stream, sink


def test_a_storm_of_replays_is_written_a_bounded_piece_per_stream_per_turn(ring):
    async def scenario(bench: Bench):
        turns = Turns()
        bench.frames(512, text=PAD)
        sinks = [TurnSink(turns) for _ in range(20)]
        for sink in sinks:
            await open_replaying(bench, sink)
        await until(lambda: all(len(sink.ids()) == 512 for sink in sinks))
        turns.stop()
        event_size = len(bench.hub.window.entry(1).wire(watcher().stream.prefix, False))
        for sink in sinks:
            assert sink.ids() == list(range(1, 513))  # each event once, in order
            assert len(sink.writes) > 1 and all(len(w) < PIECE_BYTES + event_size for w in sink.writes)
            assert len(set(sink.write_turns)) == len(sink.write_turns)  # the loop turned between pieces
        assert not bench.hub.catch_up
        bench.hub.close_all()
    run(ring, scenario)


def test_a_replay_writes_its_next_piece_only_once_its_sink_drained(ring):
    async def scenario(bench: Bench):
        stream, sink = await blocked_mid_replay(bench)
        for _ in range(20):
            await asyncio.sleep(0)  # FakeSink fails any write while blocked
        assert len(sink.writes) == 1 and stream.stream.replaying
        sink.block = False
        sink.drained()
        await until(lambda: len(sink.ids()) == 512)
        assert sink.ids() == list(range(1, 513))
        bench.hub.close_all()
    run(ring, scenario)


def test_a_replay_the_ring_overwrote_while_its_reader_was_blocked_is_written_whole(ring):
    async def scenario(bench: Bench):
        _, sink = await blocked_mid_replay(bench)
        bench.frames(300, text=PAD)  # ids 513..812 overwrite 1..300 in the ring and the window
        bench.hub.sync()
        sink.block = False
        sink.drained()
        await until(lambda: sink.ids() and sink.ids()[-1] == 812)
        lagged = [item.frame["missed"] for event_id, item in sink.items() if event_id is None]
        # the replay whole, then the live events past the queue of 128 named, then the newest 128
        assert sink.ids() == [*range(1, 513), None, *range(813 - LAG_LIMIT, 813)]
        assert lagged == [300 - LAG_LIMIT]
        bench.hub.close_all()
    run(ring, scenario)


def test_an_opening_copies_what_the_window_lacks_and_writes_no_other_stream(ring):
    async def scenario(bench: Bench):
        sink, other = FakeSink(), watcher()
        await bench.open(other, sink)
        bench.frames(3)  # written, the worker not yet woken
        since = bench.hub.reading_point()  # an opening reads its point now
        assert since == 3 and bench.hub.window.entry(3) is not None
        assert sink.writes == []  # no pass ran for it: the other stream waits for the pass
        await until(lambda: sink.ids() == [1, 2, 3])  # which the copy scheduled, on a later turn
        bench.hub.close_all()
    run(ring, scenario)


def test_live_events_for_a_replaying_watcher_wait_behind_its_replay(ring):
    async def scenario(bench: Bench):
        stream, sink = await queued_full_replay(bench)
        bench.frames(5, text=PAD)  # live: the ring and the window overwrite ids 1..5
        bench.hub.sync()  # the pass
        assert sink.writes == []  # wrote nothing of it: no replay restarted, no live event first
        await until(lambda: not stream.stream.behind(bench.hub.window))
        assert sink.ids() == list(range(1, 518))  # the whole replay, then the live ones
        bench.hub.close_all()
    run(ring, scenario)


def test_a_queued_replays_heartbeat_does_not_wait_for_its_turn(ring):
    async def scenario(bench: Bench):
        stream, sink = await queued_full_replay(bench)
        bench.hub.heartbeats._on_due(stream, 0.0)  # what the heap does when it comes due
        assert sink.writes == [sse.HEARTBEAT]
        await until(lambda: not stream.stream.behind(bench.hub.window))
        assert sink.ids() == [None, *range(1, 513)]  # the heartbeat first, then the whole replay
        bench.hub.close_all()
    run(ring, scenario)
