"""A worker's delivery loop: one pump, one window, one heartbeat heap, one pass for every stream.

The pump copies each new ring record once into the window (window.py) when the sequencer
wakes the worker, then makes one pass over the streams the new events concern: each parked
stream gathers its body (stream.py) and the hub hands it to the stream's sink (sink.py), in
the pass itself, with no coroutine switch. A stream's coroutine (`serve`) runs only for what
needs an await: its opening, a blocked sink, a task lookup, its end. A stream that is behind
after a write (a replay, a catch-up past one piece), or mid-replay when its transport has
drained, is written its next piece by the catch-up queue (catchup.py), one piece per stream
per turn of the loop, within its budget; the pass leaves a
queued replay to that queue and writes only its heartbeat. Every delivery metric
is counted here, once per pass: shared batches once per batch, each stream's own walk from
what it noted.

Progress: besides the stall pulse's timer (gateway/stall.py), the hub bumps the worker's
beat word as it writes (every PROGRESS_STREAMS streams of a pass, each catch-up run, each
opening), so the supervisor sees a busy worker's progress even inside one long pass.

Wake-up protocol (control_words.ARMED): before sleeping the worker sets its armed word and
re-reads the head; the sequencer sends one byte only to armed workers. x86-64 may reorder a
store before a later load (store buffering), so an armed flag and a head published at the
same instant can miss each other: a slow poll (`POLL_SECONDS`) closes that window.
"""

from __future__ import annotations

import asyncio
import socket
import time

from gateway import config, control_words, logs
from gateway.control import ControlClient, Op
from gateway.metrics import Counters
from gateway.protocol.activation import WATCH_SESSION
from gateway.worker.catchup import CatchUp
from gateway.worker.coalesce import next_delay
from gateway.worker.heartbeats import Heartbeats
from gateway.worker.sink import Sink
from gateway.worker.stream import Stream
from gateway.worker.window import Window
from shm import Ring

POLL_SECONDS = 0.05
PROGRESS_STREAMS = 1024  # a pass bumps the beat word once per this many streams written

log = logs.get("worker")


class Hub:
    def __init__(self, ring: Ring, wake_sock: socket.socket, index: int, interval: float,
                 counters: Counters, control: ControlClient):
        self.ring = ring
        self.counters = counters
        self.control = control
        self.wake_sock = wake_sock
        self.index = index
        self.window = Window(ring.slots)
        self.epoch = ring.epoch
        self.open_streams = 0
        self.watchers: set[Stream] = set()
        self.task_streams: dict[int, set[Stream]] = {}
        self.heartbeats: Heartbeats[Stream] = Heartbeats(interval, self._heartbeat_due)
        self.catch_up = CatchUp(self._catch_up_write, self._after_catch_up)
        self._beat_slot = control_words.LOOP_BEAT + index
        self._poll: asyncio.TimerHandle | None = None
        self._pending_sync: asyncio.Handle | None = None
        self._pending_due = 0.0  # the loop time `_pending_sync` runs at
        # Adaptive coalescing (coalesce.py): the wait before the next pass after a wake-up,
        # from how much of the loop the last pass took, and when that pass began.
        self._delay = 0.0
        self._pass_started = time.perf_counter()
        self._loop: asyncio.AbstractEventLoop | None = None

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
        delay = self._delay if waiting < config.COALESCE_MAX_EVENTS else 0.0
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
        self.sync()

    def sync(self) -> None:
        """Copy every new record into the window, then write the streams it concerns."""
        started = time.perf_counter()
        ring, words, window = self.ring, self.ring.control, self.window
        words[control_words.ARMED + self.index] = 0
        if ring.epoch != self.epoch:
            self._new_session(ring.epoch)
        target = ring.head
        keys: set[int] = set()
        advanced = target > window.head
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
        closed_at = words[control_words.SESSION_CLOSED]
        closing = window.closing or bool(words[control_words.CLOSING])
        if advanced or closed_at != window.session_closed_at or closing != window.closing:
            window.session_closed_at, window.closing = closed_at, closing
            self._pass(keys)  # only when something changed: an idle poll writes nothing
        # Every sync feeds the policy, idle polls included: a poll's share of the loop is about
        # 0, so the delay a busy spell left decays to 0 within a few polls of quiet, rather
        # than holding until the next events arrive.
        self._delay = next_delay(time.perf_counter() - started, started - self._pass_started, self._delay)
        self._pass_started = started
        words[control_words.ARMED + self.index] = 1
        if ring.head != window.head or ring.epoch != self.epoch:
            self._schedule_sync()  # written while we copied: the next batch
        elif self._poll is None:
            self._poll = self._loop.call_later(POLL_SECONDS, self._on_poll)

    def _new_session(self, epoch: int) -> None:
        self.window.clear()
        self.epoch = epoch
        for stream in self.all_streams():
            stream.session_changed = True
            if self._write(stream):
                self.counters.add("sends", label=stream.endpoint)

    # --- the pass ---

    def _progress(self) -> None:
        """The worker is writing: its beat word moves (gateway/stall.py)."""
        self.ring.control[self._beat_slot] += 1

    def _pass(self, keys: set[int]) -> None:
        everyone = self.window.closing or self.window.session_closed_at
        sends = 0
        for count, stream in enumerate(self.watchers, 1):
            sends += self._write(stream)
            if not count % PROGRESS_STREAMS:
                self._progress()
        if sends:
            self.counters.add("sends", sends, WATCH_SESSION)
        head = self.window.head
        for key, streams in self.task_streams.items():
            if everyone or key in keys:
                for stream in streams:
                    if self._write(stream):
                        self.counters.add("sends", label=stream.endpoint)
            else:  # other tasks' events: a parked task stream not queued is not behind
                for stream in streams:
                    if stream.waiter is not None and not stream.waiter.done() and not stream.queued:
                        stream.cursor = head
        self._count_batches()

    def _write(self, stream: Stream) -> int:
        """A parked stream's write in the pass or the catch-up queue: 1 when it wrote. A
        queued replay waits for its turn there (so a pass never writes a storm's replays
        at once); its heartbeat does not, and live events do not. Still behind
        after the write, and under the high-water mark: it queues for its next piece.
        Whatever needs an await (a blocked sink, a task lookup, the end) resumes its
        coroutine instead."""
        waiter = stream.waiter
        if waiter is None or waiter.done():
            return 0  # running: its coroutine looks for work before it parks again
        sink = stream.sink
        if self.window.closing or stream.check_due or sink.closed:
            waiter.set_result(None)
            return 0
        body = stream.gather(self.window, events_too=not (stream.queued and stream.replaying))
        if stream.noted is not None:
            self._count_noted(stream)
        if not body:
            if stream.ended or stream.check_due:
                waiter.set_result(None)
            return 0
        stream.bytes_sent += len(body)
        if not sink.write(body) or stream.ended or stream.check_due:
            waiter.set_result(None)
        elif stream.behind(self.window):
            self.catch_up.add(stream)
        return 1

    def _catch_up_write(self, stream: Stream) -> int:
        if self._write(stream):
            self.counters.add("sends", label=stream.endpoint)
            return 1
        return 0

    def _after_catch_up(self, written: int) -> None:
        self._count_batches()
        if written:
            self._progress()

    def _count_noted(self, stream: Stream) -> None:
        """What a stream noted of its own walk (not a shared batch), counted and dropped."""
        counters, label = self.counters, stream.endpoint
        noted, stream.noted = stream.noted, None
        if noted.lag >= 0:
            counters.observe("reader_lag_events", noted.lag, label)
            counters.add("events_delivered", noted.delivered, label)
        if noted.missed:
            counters.add("events_lost_to_lag", noted.missed, label)
            log.warning(f"SSE broadcast lagged by {noted.missed} events", endpoint=label)
        if noted.lagged_frames:
            counters.add("lagged_frames", noted.lagged_frames, label)
        if noted.beat_due is not None:
            counters.observe("heartbeat_jitter_seconds", time.monotonic() - noted.beat_due)
            counters.add("heartbeats")

    def _count_batches(self) -> None:
        """The metrics of every watcher that took a shared batch since the last count."""
        counters = self.counters
        for batch in self.window.taken_batches():
            counters.add("events_delivered", batch.events * batch.takers, WATCH_SESSION)
            counters.observe("reader_lag_events", batch.lag, WATCH_SESSION, batch.takers)
            batch.takers = 0

    def _heartbeat_due(self, stream: Stream, due: float) -> bool:
        if stream.sink is None:
            return False  # closed: dropped from the heap
        stream.heartbeat_due = due
        if self._write(stream):
            self.counters.add("sends", label=stream.endpoint)
        return True

    # --- streams ---

    def all_streams(self) -> list[Stream]:
        return list(self.watchers) + [s for group in self.task_streams.values() for s in group]

    def _add(self, stream: Stream) -> None:
        self.open_streams += 1
        if stream.task is None:
            self.watchers.add(stream)
        else:
            self.task_streams.setdefault(stream.task.key, set()).add(stream)
        self.heartbeats.add(stream)
        self.counters.add("connections_open", label=stream.endpoint)
        self.counters.add("connections", label=stream.endpoint)

    def _remove(self, stream: Stream) -> None:
        self.open_streams -= 1
        if stream.task is None:
            self.watchers.discard(stream)
        else:
            group = self.task_streams.get(stream.task.key)
            if group is not None:
                group.discard(stream)
                if not group:
                    del self.task_streams[stream.task.key]
        self.counters.sub("connections_open", label=stream.endpoint)

    def close_all(self) -> None:
        self.window.closing = True
        for stream in self.all_streams():
            stream.poke()

    def end_stream(self, stream: Stream) -> None:
        """End `stream` where it stands (a reload revoked its token, worker/reload.py): after
        the whole events already written, with no frame of its own. Its coroutine sees
        `ended` before it gathers again; a parked one is resumed to see it now. One waiting for
        a reader that stopped reading would wait as long as that reader: still open a heartbeat
        interval later, its connection is cut (DECISIONS: it ends within one interval)."""
        stream.ended = stream.revoked = True
        stream.poke()
        if stream.sink is not None and stream.sink.blocked:
            asyncio.get_running_loop().call_later(self.heartbeats.interval, self._cut_off, stream)

    @staticmethod
    def _cut_off(stream: Stream) -> None:
        sink = stream.sink  # None once its coroutine ended and let the connection go
        if sink is not None and not sink.closed:
            sink.abort()

    def _own_write(self, stream: Stream, body: bytes) -> None:
        """A write from the stream's coroutine (not the pass)."""
        if stream.noted is not None:
            self._count_noted(stream)
        if body and not stream.sink.closed:
            stream.bytes_sent += len(body)
            stream.sink.write(body)
            self.counters.add("sends", label=stream.endpoint)

    def _why_ended(self, stream: Stream, sink: Sink) -> str:
        """The access log's `reason` (access_log.py) for a stream whose loop is over."""
        window = self.window
        if window.closing:
            return "drain"
        if stream.revoked:  # its connection may have been cut for it (`_cut_off`)
            return "revoked"
        if sink.closed:
            return "client_left"
        if stream.session_changed:
            return "session_changed"
        if stream.task is None or (window.session_closed_at and stream.cursor >= window.session_closed_at - 1):
            return "session_closed"
        return "task_ended"

    async def _ending_of_lost_task(self, stream: Stream) -> bytes:
        try:
            found = await self.control.call(Op.GET, id=stream.task.id)
        except Exception:  # unreachable now: the next heartbeat asks again
            return b""
        return stream.ending_from(found["task"])

    async def serve(self, stream: Stream, sink: Sink) -> str:
        """Write the stream's opening, then live events until it ends (at once when `ended`
        is already set), the client leaves or the worker drains; why it ended (`_why_ended`).
        While nothing needs an await the coroutine parks, and the pass writes for it (`_write`)."""
        loop, window = asyncio.get_running_loop(), self.window
        stream.sink = sink
        sink.on_disconnect(stream)
        self._add(stream)
        try:
            opening, stream.opening = stream.opening, b""
            self._own_write(stream, opening)
            del opening
            self._progress()
            if stream.behind(window) and not sink.blocked:
                self.catch_up.add(stream)  # its replay: piece by piece, at the loop's pace
            while not (stream.ended or sink.closed or window.closing):
                if sink.blocked:
                    await sink.drain()
                elif stream.check_due:
                    stream.check_due = False
                    self._own_write(stream, await self._ending_of_lost_task(stream))
                elif not stream.queued and stream.has_work(window):
                    if stream.replaying:  # drained mid-replay: a due heartbeat now, the next
                        self._own_write(stream, stream.gather(window, events_too=False))
                        self.catch_up.add(stream)  # piece in its turn
                        continue
                    self._own_write(stream, stream.gather(window))
                    if stream.behind(window) and not sink.blocked:
                        self.catch_up.add(stream)
                else:
                    stream.waiter = loop.create_future()
                    try:
                        await stream.waiter
                    finally:
                        stream.waiter = None
            reason = self._why_ended(stream, sink)
            if not sink.closed:
                await sink.end()
            return reason
        finally:
            self._remove(stream)
            sink.release()
            # The heartbeat heap holds a closed stream until its next due time: let it hold
            # the stream alone, not the connection behind it.
            stream.sink = None
