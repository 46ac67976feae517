"""A worker's delivery loop: one pump, one window, one heartbeat heap, one pass for every stream.

The pump copies each new ring record once into the window (window.py) when the sequencer
wakes the worker, then makes one pass over the streams the new events concern: each parked
stream gathers its delivery (stream.py) and the hub hands its body to the stream's sink
(sink.py), in the pass itself, with no coroutine switch. The stream holds no I/O: the hub
keeps each one's sink, what it waits for, place in the catch-up queue and due heartbeat in a
record of its own (`Served`), and moves the stream through its states (stream.py's table)
as its deliveries and its sink say. Every write of a stream is one step (`_deliver`), and
what the stream does between waits is one function (`_step`), run by one of two drivers: for
a sink that writes at once (the front of HTTP/1.1 connections), callbacks (`adopt`: the
pass, a heartbeat or its sink's poke runs `_advance`; a task lookup is a short task), so an
open stream holds no coroutine, task or frame; for an ASGI sink, whose sends are awaited,
the stream's coroutine (`serve`). A stream that is behind after
a write (a replay, a catch-up past one piece), or mid-replay when its transport has drained,
is written its next piece by the catch-up queue (catchup.py), one piece per stream per turn
of the loop, within its budget; the pass leaves a queued replay to that queue and writes only
its heartbeat. Every delivery metric is counted here: each stream's own walk from the notes
its delivery returns, shared batches once per batch and pass (`Window.taken`).

Progress: besides the stall pulse's timer (gateway/stall.py), the hub bumps the worker's
beat word as it writes (every tuning.PROGRESS_STREAMS streams of a pass, each catch-up run, each
opening), so the supervisor sees a busy worker's progress even inside one long pass.

Wake-up protocol (the armed words, gateway/board.py): before sleeping the worker sets its
armed word and re-reads the head; the sequencer sends one byte only to armed workers. x86-64
may reorder a store before a later load (store buffering), so an armed flag and a head
published at the same instant can miss each other: a slow poll (`tuning.POLL_SECONDS`)
closes that window.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import time
from typing import Callable

from gateway import logs, tuning
from gateway.board import Board
from gateway.control import EVERY_TASK, ControlClient, Op
from gateway.metrics import Counters
from gateway.protocol.activation import WATCH_SESSION
from gateway.worker.delivery.catchup import CatchUp
from gateway.worker.delivery.coalesce import next_delay
from gateway.worker.delivery.heartbeats import Heartbeats
from gateway.worker.delivery.sink import Sink
from gateway.worker.delivery.stream import (BLOCKED, CHECKING, DRAINED, END, ENDING, FULL, GOES_ON, OPENED,
                                            OPENING, PARKED, Delivery, Noted, Stream)
from gateway.worker.delivery.window import Window
from shm import Ring

log = logs.get("worker")


class Hub:
    def __init__(self, ring: Ring, wake_sock: socket.socket, index: int, interval: float,
                 counters: Counters, control: ControlClient):
        self.ring = ring
        self.board = Board(ring.control)
        self.counters = counters
        self.control = control
        self.wake_sock = wake_sock
        self.index = index
        self.window = Window(ring.slots)
        self.epoch = ring.epoch
        self.watchers: set[Served] = set()
        self.task_streams: set[Served] = set()
        self.heartbeats: Heartbeats[Served] = Heartbeats(interval, self._heartbeat_due)
        self.catch_up = CatchUp(self._write, self._after_catch_up)
        self._poll: asyncio.TimerHandle | None = None
        self._pending_sync: asyncio.Handle | None = None
        self._pending_due = 0.0  # the loop time `_pending_sync` runs at
        # Adaptive coalescing (coalesce.py): the wait before the next pass after a wake-up,
        # from how much of the loop the last pass took, and when that pass began.
        self._delay = 0.0
        self._pass_started = time.perf_counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sends: dict[str, int] = {}  # writes this turn by endpoint, not yet counted
        self._lookups: set[asyncio.Task] = set()  # adopted streams' task lookups (`_advance`)
        # The app's bookkeeping when a stream is over (app.py): (served, reason), reason None
        # when it failed under it.
        self.on_end: Callable[[Served, str | None], None] = lambda served, reason: None

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

    # --- the pump ---

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.wake_sock.setblocking(False)
        self._loop.add_reader(self.wake_sock.fileno(), self._on_wake)
        self.window.head = max(0, self.ring.head - self.window.slots)
        self.sync()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.wake_sock.fileno())
        self.heartbeats.stop()
        self.catch_up.stop()
        for handle in (self._poll, self._pending_sync):
            if handle is not None:
                handle.cancel()

    def _on_wake(self) -> None:
        try:
            while self.wake_sock.recv(64):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._schedule_sync()

    def _schedule_sync(self) -> None:
        """The next pass: after the adaptive delay, or at once when so many events already
        wait (a burst) that a stream could near the lag limit before the pass."""
        waiting = self.ring.head - self.window.head
        delay = self._delay if waiting < tuning.COALESCE_MAX_EVENTS else 0.0
        pending = self._pending_sync
        if pending is not None:
            # uvloop answers call_later(0, ...) with a plain Handle, which has no when(): the
            # due time is kept here
            if delay or self._pending_due <= self._loop.time():
                return  # the pass already due serves this wake-up too
            pending.cancel()
        self._pending_due = self._loop.time() + delay
        self._pending_sync = self._loop.call_later(delay, self._coalesced_sync)

    def _coalesced_sync(self) -> None:
        self._pending_sync = None
        self.sync()

    def _on_poll(self) -> None:
        self._poll = None
        if self._pending_sync is None:  # else a wake-up came and its pass is due: no wake-up was missed
            self.sync()

    def sync(self) -> None:
        """Copy every new record into the window, then write the streams it concerns."""
        started = time.perf_counter()
        ring, board, window = self.ring, self.board, self.window
        board.disarm(self.index)
        if ring.epoch != self.epoch:
            self._new_session(ring.epoch)
        target = ring.head
        keys: set[int] = set()
        arrived = max(0, target - window.head)  # new ids since the last pass (coalesce.py)
        advanced = arrived > 0
        if advanced:
            for event_id in range(max(window.head + 1, target - window.slots + 1), target + 1):
                record = ring.read(event_id)
                if record is None:
                    window.drop(event_id)
                else:
                    keys.add(window.put(event_id, record.key, record.meta, record.data).key)
            self._count_batches()
            window.batches.clear()
            window.head = target
        window.oldest = ring.oldest
        closed_at = board.session_closed
        closing = window.closing or board.closing
        if advanced or closed_at != window.session_closed_at or closing != window.closing:
            window.session_closed_at, window.closing = closed_at, closing
            self._pass(keys)  # only when something changed: an idle poll writes nothing
        # Every sync feeds the policy, idle polls included: a poll's share of the loop is about
        # 0, so the delay a busy spell left decays to 0 within a few polls of quiet, rather
        # than holding until the next events arrive.
        self._delay = next_delay(time.perf_counter() - started, started - self._pass_started, self._delay,
                                 arrived)
        self._pass_started = started
        board.arm(self.index)
        if self._ring_moved():
            self._schedule_sync()  # written while we copied: the next batch
        elif self._poll is None:
            self._poll = self._loop.call_later(tuning.POLL_SECONDS, self._on_poll)

    def _new_session(self, epoch: int) -> None:
        self.window.clear()
        self.epoch = epoch
        for served in self.all_streams():
            served.stream.new_session()
            self._write(served)

    # --- the pass ---

    def _progress(self) -> None:
        """The worker is writing: its beat word moves (gateway/stall.py)."""
        self.board.beat(self.index)

    def _pass(self, keys: set[int]) -> None:
        everyone = self.window.closing or self.window.session_closed_at
        for count, served in enumerate(self.watchers, 1):
            self._write(served)
            if not count % tuning.PROGRESS_STREAMS:
                self._progress()
        head = self.window.head
        for served in self.task_streams:
            # A parked task stream not queued had consumed every event before this pass: the
            # stream's filter says whether any of the new ones can be its (`Stream.pass_over`).
            if not everyone and served.waiting is PARK and not served.queued and served.stream.pass_over(keys, head):
                continue
            self._write(served)
        self._count_batches()

    def _write(self, served: Served) -> int:
        """A parked stream's write in the pass, the catch-up queue or its heartbeat: 1 when it
        wrote. A queued replay waits for its turn there (so a pass never writes a storm's
        replays at once); its heartbeat does not, and live events do not. Still parked and
        behind after the write: it queues for its next piece. Whatever needs more (a full
        sink, a task lookup, the end) resumes its driver instead (`_step`)."""
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

    # --- streams ---

    def reading_point(self) -> int:
        """Copy what the ring holds now, and answer its head: a stream opened `since` it loses
        nothing written while its opening is read (app notes it before it reads the task).
        When the window holds the ring's head and session already (a storm's openings, most
        of them between two events), there is nothing to copy and no pass is run."""
        if self._ring_moved() or self.board.session_closed != self.window.session_closed_at:
            self.sync()
        return self.window.head

    def _ring_moved(self) -> bool:
        """The ring holds events the window has not copied, or began a new session."""
        return self.ring.head != self.window.head or self.ring.epoch != self.epoch

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

    def all_streams(self) -> list[Served]:
        return [*self.watchers, *self.task_streams]

    def _add(self, served: Served) -> None:
        (self.watchers if served.stream.task is None else self.task_streams).add(served)
        self.heartbeats.add(served)
        endpoint = served.stream.endpoint
        self.counters.add("connections_open", label=endpoint)
        self.counters.add("connections", label=endpoint)

    def _remove(self, served: Served) -> None:
        (self.watchers if served.stream.task is None else self.task_streams).discard(served)
        self.counters.sub("connections_open", label=served.stream.endpoint)

    def close_all(self) -> None:
        self.window.closing = True
        for served in self.all_streams():
            served.poke()

    def end_stream(self, served: Served, reason: str = "revoked") -> None:
        """End the stream where it stands, `reason` its access line's: "revoked" (a reload
        took its token's right to it, worker/reload.py) or "expired" (its token's expiry
        came, opening.py): after the whole events already written, with no frame of its
        own. Its driver sees it ENDING before it gathers again; a parked one is resumed to
        see it now. One waiting for a reader that stopped reading would wait as long as that
        reader: still open a heartbeat interval later, its connection is cut (SECURITY.md:
        it ends within one interval). A stream already ended so keeps its first reason."""
        if served.revoked is not None:
            return
        served.stream.move(END)
        served.revoked = reason
        served.poke()
        if served.sink is not None and served.sink.blocked:
            self._loop.call_later(self.heartbeats.interval, self._cut_off, served)

    @staticmethod
    def _cut_off(served: Served) -> None:
        sink = served.sink  # None once its stream ended and let the connection go
        if sink is not None and not sink.closed:
            sink.abort()

    def _why_ended(self, served: Served) -> str:
        """The access log's `reason` (access_log.py) for a stream whose loop is over."""
        window, stream = self.window, served.stream
        if window.closing:
            return "drain"
        if served.revoked is not None:  # its connection may have been cut for it (`_cut_off`)
            return served.revoked
        if served.sink.closed:
            return "client_left"
        if stream.session_changed:
            return "session_changed"
        if stream.task is None or (window.session_closed_at and stream.cursor >= window.session_closed_at - 1):
            return "session_closed"
        return "task_ended"

    async def _ending_of_lost_task(self, stream: Stream) -> Delivery:
        try:
            found = await self.control.call(Op.GET, id=stream.task.id, **EVERY_TASK.params())
        except Exception:  # unreachable now: the next heartbeat asks again
            return b"", None, None
        return stream.ending_from(found["task"])

    async def _check(self, served: Served) -> None:
        """CHECKING: its task looked up, and the ending found written."""
        self._deliver(served, await self._ending_of_lost_task(served.stream))
        if served.stream.state is CHECKING:  # neither the ending found nor ended meanwhile
            served.stream.move(GOES_ON)

    def _step(self, served: Served) -> Wait:
        """Run the stream as far as it goes without waiting (stream.py's table); what it waits
        for now. A driver runs it again when that came: `serve` for a sink whose writes need
        an await, `adopt` for one that writes at once."""
        window, stream, sink = self.window, served.stream, served.sink
        while True:
            if sink.closed or window.closing:
                stream.move(END)
            state = stream.state
            if state is ENDING:
                return DONE
            if state is BLOCKED:
                if sink.blocked:  # it may have drained already, before its driver ran
                    return DRAIN
                stream.move(DRAINED)
            elif state is CHECKING:
                # the heartbeat that found the check due leaves first
                return DRAIN if sink.blocked else CHECK
            elif not served.queued and stream.has_work(window, served.beat_due):
                due, served.beat_due = served.beat_due, None
                # Drained mid-replay: a due heartbeat now, the next piece in its turn.
                self._deliver(served, stream.gather(window, due, events_too=not stream.replaying))
                if stream.state is PARKED and stream.behind(window):
                    self.catch_up.add(served)
            else:
                return PARK

    def _open(self, served: Served, sink: Sink) -> None:
        """The stream joins the hub: its opening written, its replay queued."""
        served.sink, served.hub = sink, self
        sink.on_disconnect(served)
        self._add(served)
        stream = served.stream
        self._deliver(served, (stream.take_opening(), None, None))
        if stream.state is OPENING:  # the sink took it and takes more (else FULL moved it)
            stream.move(OPENED)
        self._progress()
        if stream.state is PARKED and stream.behind(self.window):
            self.catch_up.add(served)  # its replay: piece by piece, at the loop's pace

    def _finish(self, served: Served, reason: str | None) -> None:
        """The stream is over (`reason` None: it failed under it): it leaves the hub, its
        connection is let go, and the app is told (`on_end`)."""
        sink = served.sink
        served.waiting = None
        self._remove(served)
        sink.release()
        # The heartbeat heap holds a closed stream until its next due time: let it hold
        # the record alone, not the connection behind it.
        served.sink = None
        self.on_end(served, reason)

    async def serve(self, served: Served, sink: Sink) -> None:
        """Drive the stream from its coroutine, until it ends (at once when it is already
        ENDING), the client leaves or the worker drains: for a sink whose writes are ASGI sends
        (a stream hypercorn serves), which need an await. While PARKED with nothing to write,
        the coroutine waits and the pass writes for it (`_write`)."""
        if sink.writes_at_once:
            self.adopt(served, sink)
            return
        reason = None
        try:
            self._open(served, sink)
            while (wait := self._step(served)) is not DONE:
                if wait is DRAIN:
                    await sink.drain()
                elif wait is CHECK:
                    await self._check(served)
                else:
                    served.waiter = self._loop.create_future()
                    served.waiting = PARK
                    try:
                        await served.waiter
                    finally:
                        served.waiter = served.waiting = None
            reason = self._why_ended(served)
            if not sink.closed:
                await sink.end()
        finally:
            self._finish(served, reason)

    def adopt(self, served: Served, sink: Sink) -> None:
        """Drive the stream with no coroutine of its own, for a sink that writes, drains and
        ends at once (the front of HTTP/1.1 connections, gateway/worker/http/): the pass, its
        heartbeats and its sink's pokes (drained, client gone) run `_advance` when it has
        something to do, and a lookup is a short task. An open stream then holds no frame."""
        self._open(served, sink)
        self._advance(served)

    def _advance(self, served: Served) -> None:
        if served.sink is None:
            return  # over already
        served.waiting = None
        try:
            wait = self._step(served)
            if wait is CHECK:
                served.waiting = CHECK
                task = self._loop.create_task(self._check(served))
                self._lookups.add(task)
                task.add_done_callback(self._looked_up)
                task.served = served
            elif wait is DONE:
                reason = self._why_ended(served)
                if not served.sink.closed:
                    served.sink.end_now()
                self._finish(served, reason)
            else:
                served.waiting = wait
        except Exception as error:  # a bug: the stream is given up, never left half-served
            log.error("a stream failed", error=repr(error), endpoint=served.stream.endpoint)
            if served.sink is not None:
                served.sink.abort()
                self._finish(served, None)

    def _looked_up(self, task: asyncio.Task) -> None:
        self._lookups.discard(task)
        if task.cancelled():
            return  # the worker is stopping
        if task.exception() is not None:
            log.error("a stream's task lookup failed", error=repr(task.exception()))
        self._advance(task.served)


class Wait(enum.Enum):
    """What a stream's driver waits for (`Hub._step`)."""

    PARK = "park"  # something to write: the pass, a heartbeat, the catch-up queue or a poke
    DRAIN = "drain"  # its sink's bytes to leave (or its client to go)
    CHECK = "check"  # its task's lookup
    DONE = "done"  # nothing: the stream is over


PARK, DRAIN, CHECK, DONE = Wait


class Served:
    """The hub's record of a stream it serves: everything of it that is I/O. Its sink, what
    its driver waits for (`waiting`; None while it runs), the future its coroutine waits on
    (a stream `serve`d, not `adopt`ed), its place in the catch-up queue, the heartbeat due
    since the heap fired, and what its access-log line reports that the stream cannot know
    (the bytes handed to its sink, whether a reload revoked it or its token expired). It is the sink's listener: a
    client that leaves, or a sink that drained, pokes it."""

    __slots__ = ("stream", "hub", "sink", "waiting", "waiter", "queued", "beat_due", "bytes_sent", "revoked",
                 "exchange")

    def __init__(self, stream: Stream):
        self.stream = stream
        self.hub: Hub | None = None  # the hub that serves it, once it does (`Hub._open`)
        self.sink: Sink | None = None
        self.waiting: Wait | None = None
        self.waiter: asyncio.Future | None = None
        self.queued = False  # waiting in the catch-up queue for its next piece (catchup.py)
        self.beat_due: float | None = None  # a heartbeat due since then, not yet written
        self.bytes_sent = 0
        self.revoked: str | None = None  # "revoked" or "expired": its token's right to it ended (`end_stream`)
        self.exchange = None  # the access log's record of its request (access_log.py)

    def resume(self) -> None:
        """Its driver runs again, on the loop's next turn: its coroutine, or `Hub._advance`."""
        self.waiting = None
        waiter = self.waiter
        if waiter is None:
            self.hub._loop.call_soon(self.hub._advance, self)
        elif not waiter.done():
            waiter.set_result(None)

    def poke(self) -> None:
        """Something changed for it (the hub's pass or drain, its client left, its sink
        drained): resume it if it was parked, or waiting on a sink that now lets it go on."""
        waiting = self.waiting
        if waiting is PARK or (waiting is DRAIN and (self.sink.closed or not self.sink.blocked)):
            self.resume()
