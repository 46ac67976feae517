"""The one driver of every stream the hub serves (`Drivers`), and the hub's record of it (`Served`).

What a stream does between two waits is one function, `_step`: it does what the stream's
state asks (stream.py's table) until the stream must wait, and says for what (`Wait`). It is
run by callbacks alone (`serve`): the pass, a heartbeat or its sink's poke (drained, client
gone) runs `advance` on the loop's next turn, a task lookup is a short task, and the end is
handed to the sink at once (`Sink.end_now`). So an open stream holds no coroutine, task or
frame of the hub's. Every sink writes without waiting and pokes its stream when it drained:
the front of HTTP/1.1 connections as its transport drains, the ASGI sink of HTTP/2 as its
send returns (its sends run in the request's coroutine, which an ASGI response keeps:
asgi_sink.py). The end is reported once, to the hub (`ended`), which tells the app.

The hub holds one `Drivers` and gives it what it runs with: the window, the catch-up queue,
the control client (lookups), the heartbeat interval (`end_stream`'s cut), and its own steps
(`deliver`, `opened`, `ended`, `progress`).
"""

from __future__ import annotations

import asyncio
import enum
import functools
from typing import TYPE_CHECKING, Callable

from gateway import logs
from gateway.common.control import EVERY_TASK, ControlClient, Op
from gateway.worker.delivery.sink import Sink
from gateway.worker.delivery.stream import (BLOCKED, CHECKING, DRAINED, END, ENDING, GOES_ON, OPENED, OPENING,
                                            PARKED, Delivery, Stream)

if TYPE_CHECKING:
    from gateway.worker.delivery.catchup import CatchUp
    from gateway.worker.delivery.window import Window

log = logs.get("worker")


class Drivers:
    """Runs the streams of one hub (see the module's docstring)."""

    def __init__(self, window: Window, catch_up: CatchUp[Served], control: ControlClient, interval: float, *,
                 deliver: Callable[[Served, Delivery], int], opened: Callable[[Served], None],
                 ended: Callable[[Served, str | None], None], progress: Callable[[], None]):
        self.window = window
        self.catch_up = catch_up
        self.control = control
        self.interval = interval  # the heartbeat interval: a blocked stream ended is cut this much later
        self._deliver = deliver  # the hub's one delivery step (`Hub._deliver`)
        self._opened = opened  # the stream joins the hub's sets, heap and gauges
        self._ended = ended  # it leaves them, and the app is told: (served, reason), None when it failed
        self._progress = progress  # the worker's beat word moves
        self.loop: asyncio.AbstractEventLoop | None = None  # the hub's, once it started
        self._lookups: set[asyncio.Task] = set()  # task lookups in flight (`advance`)

    def serve(self, served: Served, sink: Sink) -> None:
        """The stream joins the hub through `sink`, and is driven from here by callbacks: its
        opening written, its replay queued. Returns at once."""
        served.sink, served.driver = sink, self
        sink.on_disconnect(served)
        self._opened(served)
        stream = served.stream
        try:
            self._deliver(served, (stream.take_opening(), None, None))
            if stream.state is OPENING:  # the sink took it and takes more (else FULL moved it)
                stream.move(OPENED)
            self._progress()
            if stream.state is PARKED and stream.behind(self.window):
                self.catch_up.add(served)  # its replay: piece by piece, at the loop's pace
        except Exception as error:
            return self._failed(served, error)
        self.advance(served)

    def end_stream(self, served: Served, reason: str = "revoked", cut_in: float | None = None) -> None:
        """End the stream where it stands, `reason` its access line's: "revoked" (a reload
        took its token's right to it, worker/reload.py), "expired" (its token's expiry
        came, opening.py) or "lapped" (the lapped-replay budget, `Hub._bound_lapped`): after the whole events already
        written, with no frame of its own. Its driver sees it ENDING before it gathers again;
        a parked one is resumed to see it now. One waiting for a reader that stopped reading
        would wait as long as that reader: still open `cut_in` seconds later (one heartbeat
        interval unless given), its connection is cut (SECURITY.md: it ends within one
        interval). A stream already ended so keeps its first reason."""
        if served.ended_by is not None:
            return
        served.stream.move(END)
        served.ended_by = reason
        served.poke()
        if served.sink is not None and served.sink.blocked:
            delay = self.interval if cut_in is None else cut_in
            self.loop.call_later(delay, self._cut_off, served)

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
        if served.ended_by is not None:  # its connection may have been cut for it (`_cut_off`)
            return served.ended_by
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
        for now. `advance` runs it again when that came."""
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

    def _finish(self, served: Served, reason: str | None) -> None:
        """The stream is over (`reason` None: it failed under it): its connection is let go,
        and it leaves the hub, which tells the app (`ended`)."""
        sink = served.sink
        served.waiting = None
        served.stream.replay = None  # its view let go now, not when the heap drops the record
        sink.release()
        # The heartbeat heap holds a closed stream until its next due time: let it hold
        # the record alone, not the connection behind it.
        served.sink = None
        self._ended(served, reason)

    def advance(self, served: Served) -> None:
        """Run the stream until it waits (`_step`), and leave it waiting for that: the pass, a
        heartbeat or its sink's poke runs this again; a lookup is a short task; the end is
        handed to its sink and the stream finished, there and then."""
        if served.sink is None:
            return  # over already
        served.waiting = None
        try:
            wait = self._step(served)
            if wait is CHECK:
                served.waiting = CHECK
                task = self.loop.create_task(self._check(served))
                self._lookups.add(task)
                task.add_done_callback(functools.partial(self._looked_up, served))
            elif wait is DONE:
                reason = self._why_ended(served)
                if not served.sink.closed:
                    served.sink.end_now()
                self._finish(served, reason)
            else:
                served.waiting = wait
        except Exception as error:
            self._failed(served, error)

    def _failed(self, served: Served, error: Exception) -> None:
        """A bug: the stream is given up, never left half-served."""
        log.error("a stream failed", error=repr(error), endpoint=served.stream.endpoint)
        if served.sink is not None:
            served.sink.abort()
            self._finish(served, None)

    def _looked_up(self, served: Served, task: asyncio.Task) -> None:
        self._lookups.discard(task)
        if task.cancelled():
            return  # the worker is stopping
        if task.exception() is not None:
            log.error("a stream's task lookup failed", error=repr(task.exception()))
        self.advance(served)


class Wait(enum.Enum):
    """What a stream's driver waits for (`Drivers._step`)."""

    PARK = "park"  # something to write: the pass, a heartbeat, the catch-up queue or a poke
    DRAIN = "drain"  # its sink's bytes to leave (or its client to go)
    CHECK = "check"  # its task's lookup
    DONE = "done"  # nothing: the stream is over


PARK, DRAIN, CHECK, DONE = Wait


class Served:
    """The hub's record of a stream it serves: everything of it that is I/O. Its sink, what
    its driver waits for (`waiting`; None while it runs), its place in the catch-up queue,
    the heartbeat due since the heap fired, and what its access-log line reports that the
    stream cannot know (the bytes handed to its sink, why the hub ended it: a reload revoked
    it, its token expired, its replay was lapped past the worker's budget). It is the sink's
    listener: a client that leaves, or a sink that drained, pokes it."""

    __slots__ = ("stream", "driver", "sink", "waiting", "queued", "passing", "beat_due", "bytes_sent",
                 "ended_by", "exchange")

    def __init__(self, stream: Stream):
        self.stream = stream
        self.driver: Drivers | None = None  # the driver that runs it, once served (`Drivers.serve`)
        self.sink: Sink | None = None
        self.waiting: Wait | None = None
        self.queued = False  # waiting in the catch-up queue for its next piece (catchup.py)
        self.passing = False  # waiting for its turn in a pass longer than one turn (`Hub._pass`)
        self.beat_due: float | None = None  # a heartbeat due since then, not yet written
        self.bytes_sent = 0
        self.ended_by: str | None = None  # "revoked", "expired" or "lapped" (`end_stream`)
        # The app's record of its request (the access log's `Exchange`), kept for it until
        # the stream is over: the hub never reads it.
        self.exchange: object | None = None

    def resume(self) -> None:
        """Its driver runs again, on the loop's next turn (`Drivers.advance`)."""
        self.waiting = None
        driver = self.driver
        driver.loop.call_soon(driver.advance, self)

    def poke(self) -> None:
        """Something changed for it (the hub's pass or drain, its client left, its sink
        drained): resume it if it was parked, or waiting on a sink that now lets it go on."""
        waiting = self.waiting
        if waiting is PARK or (waiting is DRAIN and (self.sink.closed or not self.sink.blocked)):
            self.resume()
