"""The two drivers of a stream the hub serves, and the hub's record of it (`Served`).

What a stream does between two waits is one function, `_step`: it does what the stream's
state asks (stream.py's table) until the stream must wait, and says for what (`Wait`). Two
drivers run it. A sink that writes, drains and ends at once (`writes_at_once`: the front of
HTTP/1.1 connections) is driven by callbacks (`adopt`): the pass, a heartbeat or its sink's
poke runs `_advance` on the loop's next turn, a task lookup is a short task, so an open stream
holds no coroutine, task or frame. An ASGI sink, whose sends are awaited, is driven by the
stream's coroutine (`serve`). Either way the end is reported once, to the app (`on_end`).

`Drivers` is the hub's part that runs them (mixed into `hub.Hub`, which holds the window,
the pass and the catch-up queue they use).
"""

from __future__ import annotations

import asyncio
import enum
import functools
from typing import TYPE_CHECKING, Callable, cast

from gateway import logs
from gateway.common.control import EVERY_TASK, ControlClient, Op
from gateway.worker.delivery.sink import AtOnceSink, Sink
from gateway.worker.delivery.stream import (BLOCKED, CHECKING, DRAINED, END, ENDING, GOES_ON, OPENED, OPENING,
                                            PARKED, Delivery, Stream)

if TYPE_CHECKING:
    from gateway.worker.access_log import Exchange
    from gateway.worker.delivery.catchup import CatchUp
    from gateway.worker.delivery.heartbeats import Heartbeats
    from gateway.worker.delivery.window import Window

log = logs.get("worker")


class Drivers:
    """The stream drivers of a hub (see the module's docstring)."""

    window: Window
    catch_up: CatchUp[Served]
    control: ControlClient
    _loop: asyncio.AbstractEventLoop | None
    _lookups: set[asyncio.Task]
    on_end: Callable[[Served, str | None], None]
    _deliver: Callable[[Served, Delivery], int]
    _add: Callable[[Served], None]
    _remove: Callable[[Served], None]
    _progress: Callable[[], None]
    heartbeats: Heartbeats

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
            delay = self.heartbeats.interval if cut_in is None else cut_in
            self._loop.call_later(delay, self._cut_off, served)

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
        served.stream.replay = None  # its view let go now, not when the heap drops the record
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
                task.add_done_callback(functools.partial(self._looked_up, served))
            elif wait is DONE:
                reason = self._why_ended(served)
                if not served.sink.closed:
                    cast(AtOnceSink, served.sink).end_now()  # adopted: it writes at once
                self._finish(served, reason)
            else:
                served.waiting = wait
        except Exception as error:  # a bug: the stream is given up, never left half-served
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
        self._advance(served)


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
    (the bytes handed to its sink, why the hub ended it: a reload revoked it, its token expired,
    its replay was lapped past the worker's budget). It is the sink's listener: a client that leaves, or a sink that
    drained, pokes it."""

    __slots__ = ("stream", "hub", "sink", "waiting", "waiter", "queued", "passing", "beat_due", "bytes_sent",
                 "ended_by", "exchange")

    def __init__(self, stream: Stream):
        self.stream = stream
        self.hub: Drivers | None = None  # the hub that serves it, once it does (`Hub._open`)
        self.sink: Sink | None = None
        self.waiting: Wait | None = None
        self.waiter: asyncio.Future | None = None
        self.queued = False  # waiting in the catch-up queue for its next piece (catchup.py)
        self.passing = False  # waiting for its turn in a pass longer than one turn (`Hub._pass`)
        self.beat_due: float | None = None  # a heartbeat due since then, not yet written
        self.bytes_sent = 0
        self.ended_by: str | None = None  # "revoked", "expired" or "lapped" (`end_stream`)
        self.exchange: Exchange | None = None  # the access log's record of its request (access_log.py)

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
