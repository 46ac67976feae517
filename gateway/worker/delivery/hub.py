"""A worker's delivery loop: one pump, one window, one heartbeat heap, one pass for every stream.

The pump (pump.py) copies each new ring record once into the window (window.py) when the
sequencer wakes the worker, then the hub makes one pass over the streams the new events
concern: each parked stream gathers its delivery (stream.py) and the hub hands its body to
the stream's sink (sink.py), in the pass itself, with no coroutine switch. The stream holds
no I/O: the hub keeps each one's sink, what it waits for, place in the catch-up queue and due
heartbeat in a record of its own (`drivers.Served`), and moves the stream through its states
(stream.py's table) as its deliveries and its sink say. Every write of a stream is one step
(`_deliver`); what the stream does between waits is run by the hub's driver (`drivers.Drivers`,
which the hub holds and gives its steps).

An opening costs its own stream: `reading_point` copies what the window lacks and runs no
pass; the other streams get those events in the pass the copy scheduled, once a turn. A
stream that is behind after a write (a replay, a catch-up past one piece), or mid-replay when
its transport has drained, is written its next piece by the catch-up queue (catchup.py), one
piece per stream per run, within a turn's budget; the pass leaves a queued replay to that
queue and writes only its heartbeat, and live events for a replaying stream wait behind its
replay. Every delivery metric is counted here: each stream's own walk from the notes its
delivery returns, shared batches once per batch and pass (`Window.taken`).

Replays that cannot keep up: while a replay is open, the hub holds what lapped views keep
alive to the worker's budget (`_bound_lapped`, lapped.py's rule).

Progress: besides the stall pulse's timer (gateway/common/stall.py), the hub bumps the worker's
beat word as it writes (each slice of a pass that leaves more for the next turn, each catch-up
run, each opening), so the supervisor sees a busy worker's progress even inside one long pass.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections import deque
from typing import Callable

from gateway import logs, tuning
from gateway.common.control import ControlClient
from gateway.common.metrics import Counters
from gateway.protocol.activation import WATCH_SESSION
from gateway.worker.delivery.catchup import CatchUp
from gateway.worker.delivery.drivers import PARK, Drivers, Served
from gateway.worker.delivery.heartbeats import Heartbeats
from gateway.worker.delivery.lapped import over_budget
from gateway.worker.delivery.pump import Pump
from gateway.worker.delivery.sink import Sink
from gateway.worker.delivery.stream import FULL, PARKED, Delivery, Noted, Stream
from gateway.worker.delivery.window import Window
from shm import Ring

log = logs.get("worker")


class Hub:
    def __init__(self, ring: Ring, wake_sock: socket.socket, index: int, interval: float,
                 counters: Counters, control: ControlClient, lapped_budget: int = tuning.LAPPED_REPLAY_BYTES):
        self.ring = ring
        self.counters = counters
        self.control = control
        self.index = index
        self.window = Window(ring.slots)
        self.pump = Pump(ring, wake_sock, index, self.window, run_pass=self._pass,
                         new_session=self._new_session, before_copy=self._count_batches,
                         pass_seconds=self._take_pass_seconds)
        self.board = self.pump.board
        self.watchers: set[Served] = set()
        self.task_streams: set[Served] = set()  # and watchers of one owner's tasks: a pass may pass over
        self.heartbeats: Heartbeats[Served] = Heartbeats(interval, self._heartbeat_due)
        self.catch_up = CatchUp(self._write, self._after_catch_up)
        self._line: deque[Served] = deque()  # streams a pass has yet to write (`_pass`)
        self._pass_handle: asyncio.Handle | None = None
        self._pass_seconds = 0.0  # the pass's slices' time since the pump last asked (its coalescing)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sends: dict[str, int] = {}  # writes this turn by endpoint, not yet counted
        # Streams opened with a replay, until it is written or they end (`_bound_lapped`)
        self.replaying: set[Served] = set()
        self.lapped_budget = lapped_budget
        self._lapped_check: asyncio.TimerHandle | None = None
        self._lapped_head = -1  # the head the last measure saw (`_bound_lapped`)
        # The app's bookkeeping when a stream is over (app.py): (served, reason), reason None
        # when it failed under it.
        self.on_end: Callable[[Served, str | None], None] = lambda served, reason: None
        self.drivers = Drivers(self.window, self.catch_up, control, interval, deliver=self._deliver,
                               opened=self._add, ended=self._ended, progress=self._progress)

    @property
    def head(self) -> int:
        return self.window.head

    @property
    def oldest(self) -> int:
        return self.window.oldest

    @property
    def next_id(self) -> int:
        return self.window.head + 1

    @property
    def closing(self) -> bool:
        return self.window.closing

    def start(self) -> None:
        self._loop = self.drivers.loop = asyncio.get_running_loop()
        self.pump.start()

    def stop(self) -> None:
        self.pump.stop()
        self.heartbeats.stop()
        self.catch_up.stop()
        if self._pass_handle is not None:
            self._pass_handle.cancel()
        if self._lapped_check is not None:
            self._lapped_check.cancel()

    def sync(self) -> None:
        """Copy every new record into the window, then write the streams it concerns."""
        self.pump.sync()

    def _new_session(self) -> None:
        """The pump cleared the window for a new session: every stream ends."""
        for served in self.all_streams():
            served.stream.new_session()
            self._write(served)

    # --- the pass ---

    def _progress(self) -> None:
        """The worker is writing: its beat word moves (gateway/common/stall.py)."""
        self.board.beat(self.index)

    def _pass(self, keys: set[int]) -> None:
        """Every watcher, and every filtered stream the new events (`keys`) may concern, joins the
        pass's line (once: one still waiting from the last pass writes whatever is due when
        its turn comes); a long line is written PASS_SLICE_SECONDS a turn, in order, so a
        pass over tens of thousands of streams lets heartbeats and openings run between. The
        pump's coalescing (coalesce.py) is told every slice's time (`_take_pass_seconds`)."""
        everyone = self.window.closing or self.window.session_closed_at
        line = self._line
        for served in self.watchers:
            if not served.passing:
                served.passing = True
                line.append(served)
        head = self.window.head
        for served in self.task_streams:
            if served.passing:
                continue
            # A parked task stream not queued had consumed every event before this pass: the
            # stream's filter says whether any of the new ones can be its (`Stream.pass_over`).
            if not everyone and served.waiting is PARK and not served.queued and served.stream.pass_over(keys, head):
                continue
            served.passing = True
            line.append(served)
        if self._pass_handle is None:  # else the line's next turn is due: these wait behind it
            self._pass_on()

    def _take_pass_seconds(self) -> float:
        spent, self._pass_seconds = self._pass_seconds, 0.0
        return spent

    def _pass_on(self) -> None:
        """The pass's line, whole when it holds at most PASS_WHOLE_STREAMS, else for
        PASS_SLICE_SECONDS; the rest on the next turn."""
        self._pass_handle = None
        started = now = time.perf_counter()
        line = self._line
        deadline = started + tuning.PASS_SLICE_SECONDS if len(line) > tuning.PASS_WHOLE_STREAMS else math.inf
        while line:  # one stream at least, however short the slice
            served = line.popleft()
            served.passing = False
            self._write(served)
            now = time.perf_counter()
            if now >= deadline:
                break
        self._count_batches()
        self._pass_seconds += now - started
        if line:
            self._progress()
            self._pass_handle = self._loop.call_soon(self._pass_on)

    def _write(self, served: Served) -> int:
        """A parked stream's write in the pass, the catch-up queue or its heartbeat: 1 when it
        wrote. A queued replay waits for its turn there (so a pass never writes a storm's
        replays at once); its heartbeat does not, and live events do not. Still parked and
        behind after the write: it queues for its next piece. Whatever needs more (a full
        sink, a task lookup, the end) resumes its driver instead (`Drivers._step`)."""
        if served.waiting is not PARK:
            return 0  # running, or waiting on its sink or a lookup: it looks for work before it parks
        if self.window.closing or served.sink.closed:
            served.resume()
            return 0
        stream, due = served.stream, served.beat_due
        if due is not None:
            served.beat_due = None
        delivery = stream.gather(self.window, due, not (served.queued and stream.replaying))
        wrote = self._deliver(served, delivery)
        if stream.state is not PARKED:
            served.resume()
        elif wrote and stream.behind(self.window):
            self.catch_up.add(served)
        return wrote

    def _deliver(self, served: Served, delivery: Delivery) -> int:
        """The one delivery step, whoever runs it (a pass, the catch-up queue, a heartbeat, the
        stream's own driver): what the stream noted counted, its body handed to the sink and
        counted as a send, and the stream moved as the delivery says (FULL when the sink took
        it and is full, and nothing else happened). 1 when it wrote."""
        body, happened, noted = delivery
        stream = served.stream
        if noted is not None:
            self._count_noted(stream.endpoint, noted)
        wrote = 0
        sink = served.sink
        if body and not sink.closed:
            served.bytes_sent += len(body)
            wrote = 1
            sends = self._sends  # counted into the metrics once a turn (`_count_sends`)
            if not sends:
                self._loop.call_soon(self._count_sends)
            sends[stream.endpoint] = sends.get(stream.endpoint, 0) + 1
            if not sink.write(body) and happened is None:
                happened = FULL
        if happened is not None:
            stream.move(happened)
        return wrote

    def _after_catch_up(self, written: int) -> None:
        self._count_batches()
        if written:
            self._progress()

    def _count_sends(self) -> None:
        """The turn's sends, one add per endpoint: a pass writes thousands of watchers."""
        sends, self._sends = self._sends, {}
        for endpoint, count in sends.items():
            self.counters.add("sends", count, endpoint)

    def _count_noted(self, label: str, noted: Noted) -> None:
        """What a stream's step noted of its own walk or heartbeat (not a shared batch)."""
        counters = self.counters
        if noted.lag >= 0:
            counters.observe("reader_lag_events", noted.lag, label)
            counters.add("events_delivered", noted.delivered, label)
        if noted.missed:
            counters.add("events_lost_to_lag", noted.missed, label)
            log.warning(f"SSE broadcast lagged by {noted.missed} events", endpoint=label)
        if noted.lagged_frames:
            counters.add("lagged_frames", noted.lagged_frames, label)
        if noted.beat_due is not None:
            counters.add("heartbeats")

    def _count_batches(self) -> None:
        """The metrics of every watcher that took a shared batch since the last count."""
        counters = self.counters
        for events, lag, takers in self.window.taken():
            counters.add("events_delivered", events * takers, WATCH_SESSION)
            counters.observe("reader_lag_events", lag, WATCH_SESSION, takers)

    def _heartbeat_due(self, served: Served, due: float) -> bool:
        """The heap hands the stream its heartbeat: how late that is, is the loop's jitter. A
        stream whose client is not reading writes it once its sink drains: that wait is the
        client's, counted apart (`heartbeats_blocked`), never as jitter."""
        if served.sink is None:
            return False  # closed: dropped from the heap
        self.counters.observe("heartbeat_jitter_seconds", time.monotonic() - due)
        if served.sink.blocked:
            self.counters.add("heartbeats_blocked")
        served.beat_due = due
        self._write(served)
        return True

    def _bound_lapped(self) -> None:
        """The lapped-replay budget (lapped.py), every LAPPED_CHECK_SECONDS while a replay is
        open: the lapped streams of the oldest views past it end now, reason "lapped" (one
        whose client reads nothing has its connection cut at once). Views are lapped, and let
        entries go, only as the head moves: a head the last measure saw is not measured again."""
        replaying = self.replaying
        for served in [served for served in replaying if served.stream.replay is None]:
            replaying.discard(served)  # its replay written whole: its view let go
        if self.window.head != self._lapped_head:
            self._lapped_head = self.window.head
            for served in over_budget(replaying, self.window, self.lapped_budget):
                self.drivers.end_stream(served, "lapped", cut_in=0)
        self._lapped_check = (self._loop.call_later(tuning.LAPPED_CHECK_SECONDS, self._bound_lapped)
                              if replaying else None)

    # --- streams ---

    def reading_point(self) -> int:
        """The head a stream opened now follows: the window copies what the ring holds that it
        lacks (and the session's words), and runs no pass (pump.py, `copy`): a stream opened
        `since` it loses nothing written while its opening is read (app notes it before it
        reads the task), and an opening costs its own stream alone, whatever the live rate."""
        self.pump.copy()
        return self.window.head

    @property
    def upstream_threaded(self) -> bool:
        """The upstream's ack said its conversation is threaded (upstream mode)."""
        return bool(self.board.upstream_threaded)

    def open_stream(self, *, since: int, replay_after: int | None, **stream) -> Served:
        """A stream whose live events follow `since` (`reading_point`), and, when
        `replay_after` is a number, whose replay is the window's events after it up to the
        head now (`Stream.start_replay`). It is served once its opening is set (`serve`)."""
        opened = Stream(cursor=since, **stream)
        if replay_after is not None:
            opened.start_replay(self.window, replay_after)
        return Served(opened)

    def serve(self, served: Served, sink: Sink) -> None:
        """Serve the stream through `sink` from now until it ends (drivers.py): returns at once,
        and its end is reported to the app (`on_end`)."""
        self.drivers.serve(served, sink)

    def end_stream(self, served: Served, reason: str = "revoked", cut_in: float | None = None) -> None:
        """End the stream where it stands, `reason` its access line's (`Drivers.end_stream`)."""
        self.drivers.end_stream(served, reason, cut_in)

    def all_streams(self) -> list[Served]:
        return [*self.watchers, *self.task_streams]

    def _set_of(self, served: Served) -> set[Served]:
        """Watchers of every event, or the streams with a filter of their own (a task's, an
        owner's), which a pass passes over when none of its events can be theirs."""
        stream = served.stream
        return self.watchers if stream.task is None and stream.owner is None else self.task_streams

    def _add(self, served: Served) -> None:
        self._set_of(served).add(served)
        self.heartbeats.add(served)
        if served.stream.replay is not None:
            self.replaying.add(served)
            if self._lapped_check is None:
                self._lapped_check = self._loop.call_later(tuning.LAPPED_CHECK_SECONDS, self._bound_lapped)
        endpoint = served.stream.endpoint
        self.counters.add("connections_open", label=endpoint)
        self.counters.add("connections", label=endpoint)

    def _ended(self, served: Served, reason: str | None) -> None:
        """The stream is over (its driver let its connection go): it leaves, and the app is told."""
        self._set_of(served).discard(served)
        self.replaying.discard(served)
        self.counters.sub("connections_open", label=served.stream.endpoint)
        self.on_end(served, reason)

    def close_all(self) -> None:
        self.window.closing = True
        for served in self.all_streams():
            served.poke()

