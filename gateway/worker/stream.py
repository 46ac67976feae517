"""One open SSE connection: which bytes it writes, and when it ends. No I/O.

A stream owns an integer cursor into the worker's window (window.py). When the hub asks
(`gather`), it takes every pending event its filter accepts, a due heartbeat and the
session's end, and answers them as one body; the hub hands that body to the connection's
sink (sink.py) and counts what the stream noted of it (`Noted`).
A task stream ends after its task's terminal status, and a SendStreamingMessage stream also
after a live input-required one (`ends`). The lag rule lives here, once:

    A connection more than 128 events behind the ring head skips to head - 128 and, when
    activated, writes one `lagged` frame naming the events it skipped (other tasks' too)
    before the next event it receives. It stays open, and the worker logs
    "SSE broadcast lagged by <n> events". A client that stops reading fills its transport
    buffer past the high-water mark: its sink reports itself blocked, the hub stops writing
    to it until it drains, its cursor stays behind, so it lags rather than being buffered
    without bound.

The replay is the window's events after Last-Event-ID up to the head when the request was
read (`replay_end`), walked from the same cursor as live events, a piece at a time (at most
window.PIECE_BYTES a write): the opening holds only the head frames (ack or task, gap), never
a copy of the buffer. The lag rule does not apply inside the replay, only to live events
after `replay_end`. An event the window no longer holds when the stream reaches it (the ring
overwrote it while the reader was slow) is lost like a live one: counted and named by a
`lagged` frame before the next event it receives. Each event is written once, in order.

A task stream that lost events may have lost its ending: from the first loss on it sets
`check_due` at each heartbeat, the hub looks its task up, and `ending_from` answers the
ending found (spec "Events a connection misses").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import orjson

from gateway import records
from gateway.protocol import events, sse, states
from gateway.protocol.lag import LAG_LIMIT, skip_lag
from gateway.worker.window import PIECE_BYTES, Entry, Window

if TYPE_CHECKING:
    from gateway.worker.sink import Sink


class TaskView:
    """What a task stream knows of its task: ids for carriers, and how it ends."""

    __slots__ = ("id", "context_id", "key", "ends_on_input", "opening_state")

    def __init__(self, snapshot: dict, key: int, ends_on_input: bool):
        self.id = snapshot["id"]
        self.context_id = snapshot["contextId"]
        self.key = key
        self.ends_on_input = ends_on_input
        self.opening_state = snapshot["status"]["state"]


class Noted:
    """What a stream's own walk or heartbeat noted since the hub last counted: the hub's
    metrics of it (a shared batch is counted apart, by its takers). Made only when there is
    something to note, so a stream on the shared path carries none."""

    __slots__ = ("delivered", "lag", "missed", "lagged_frames", "beat_due")

    def __init__(self) -> None:
        self.delivered = 0
        self.lag = -1  # events behind the head when it walked the window (-1: it did not)
        self.missed = 0
        self.lagged_frames = 0
        self.beat_due: float | None = None  # the due time of the heartbeat it wrote


class Stream:
    # Every open stream holds one of these for as long as it is open: slots, and only what
    # it reads (the request id lives inside `prefix`, activation is `not plain`).
    __slots__ = ("endpoint", "prefix", "task", "plain", "cursor", "replay_end", "opening", "ended",
                 "lost", "last_state", "pending_missed", "heartbeat_due", "session_changed",
                 "check_due", "noted", "sink", "waiter", "queued", "events_sent", "bytes_sent",
                 "revoked")

    def __init__(self, *, endpoint: str, rpc_id_json: bytes, task: TaskView | None = None,
                 activated: bool = True):
        self.endpoint = endpoint
        self.prefix = sse.rpc_prefix(rpc_id_json)
        self.task = task
        self.plain = not activated
        self.cursor = 0
        self.replay_end = 0  # the head when the request was read: ids up to it are the replay
        self.opening = b""  # written first (ack or task, gap); dropped once written
        self.ended = False
        self.lost = False  # a task stream lost an event: it checks its task at heartbeats
        self.last_state = task.opening_state if task else None
        self.pending_missed = 0  # lost events its next `lagged` frame names
        self.heartbeat_due: float | None = None  # set by the hub: a heartbeat due since then
        self.session_changed = False  # set by the hub: the ring started a new session
        self.check_due = False  # a lost task stream wants its task looked up (`ending_from`)
        self.noted: Noted | None = None  # for the hub's metrics, which it takes and counts
        # The hub's: where the bytes go, and the coroutine parked while the hub writes.
        self.sink: Sink | None = None
        self.waiter: asyncio.Future | None = None
        self.queued = False  # the hub's: waiting in its catch-up queue for its next piece
        # What its access-log line reports at its end (access_log.py): numbered events taken,
        # and the body bytes the hub handed to the sink.
        self.events_sent = 0
        self.bytes_sent = 0
        self.revoked = False  # ended by a reload that took its token's right to it (Hub.end_stream)

    @property
    def activated(self) -> bool:
        return not self.plain

    def _note(self) -> Noted:
        noted = self.noted
        if noted is None:
            noted = self.noted = Noted()
        return noted

    def poke(self) -> None:
        """Resume the stream's coroutine if it is parked (the hub's, or the sink's on a
        disconnect)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- the bytes ---

    def unnumbered(self, result: dict) -> bytes:
        return sse.join_event(sse.UNNUMBERED_HEAD, self.prefix, orjson.dumps(result))

    def connection_frame(self, frame: dict) -> bytes:
        """gap / lagged / connection-ack / capsule-closed in the carrier this stream uses."""
        if self.task is None:
            return self.unnumbered(events.taskless_frame_event(frame))
        return self.unnumbered(events.task_frame_event(
            self.task.id, self.task.context_id, frame, state=self.last_state))

    def accepts(self, entry: Entry) -> bool:
        if self.task is None:
            return True
        return entry.key == self.task.key and not (self.plain and entry.meta & records.FRAME)

    def ends(self, terminal: bool, input_required: bool, live: bool) -> bool:
        """How a task stream ends: after its task's terminal status, and a SendStreamingMessage
        stream also after an input-required status it receives live (not replayed)."""
        if self.task is None:
            return False
        return bool(terminal) or (live and self.task.ends_on_input and bool(input_required))

    def ends_at(self, entry: Entry, live: bool) -> bool:
        meta = entry.meta
        return self.ends(meta & records.TERMINAL, meta & records.INPUT_REQUIRED, live)

    def _name_missed(self, parts: list[bytes]) -> None:
        """Before the next event it receives, an activated stream is told what it lost."""
        if not self.plain:
            parts.append(self.connection_frame(events.lagged_frame(self.pending_missed)))
            self._note().lagged_frames += 1
        self.pending_missed = 0

    def take(self, entry: Entry, parts: list[bytes]) -> None:
        if self.pending_missed:
            self._name_missed(parts)
        parts.append(entry.wire(self.prefix, self.plain))
        self.events_sent += 1
        if entry.meta & records.STATUS:
            self.last_state = records.meta_state(entry.meta)

    def start_replay(self, window: Window, after: int) -> None:
        """Replay the buffered events with id > after (this stream's filter), up to the head
        now; the pieces are written from the window as the hub gets to them (`gather`)."""
        self.replay_end = window.head
        self.cursor = min(max(after, window.oldest - 1), window.head)

    @property
    def replaying(self) -> bool:
        return self.cursor < self.replay_end

    def behind(self, window: Window) -> bool:
        """Events are pending after the last write: a replay, or a catch-up past one piece."""
        return window.head > self.cursor

    def has_work(self, window: Window) -> bool:
        return (window.head > self.cursor or self.heartbeat_due is not None or self.session_changed
                or bool(window.session_closed_at) or self.ended or self.check_due)

    def gather(self, window: Window, events_too: bool = True) -> bytes:
        """What is due now: pending events (one piece; none when not `events_too`: a queued
        stream's events wait for its turn, a heartbeat never does), a due heartbeat, the
        session's end. Sets `ended`, and `check_due` when a lost task stream must have its
        task looked up."""
        parts: list[bytes] = []
        # A replay whose pending events all left the window writes nothing of it: the live
        # events after it are then this write's piece (at most two walks: replay, live).
        while events_too and not parts and not self.ended and self.behind(window):
            self.ended = self._collect(window, parts)
        due = self.heartbeat_due
        if due is not None:
            self.heartbeat_due = None
            self._note().beat_due = due
            parts.append(sse.HEARTBEAT)
            self.check_due = self.lost and self.task is not None and not self.ended
        closed_at = window.session_closed_at
        if self.session_changed or (closed_at and self.cursor >= closed_at - 1):
            if self.task is None:
                parts.append(self.connection_frame(events.capsule_closed_frame()))
            self.ended = True
        return b"".join(parts)

    def _collect(self, window: Window, parts: list[bytes]) -> bool:
        """The pending events this stream accepts, at most a piece of them (window.PIECE_BYTES,
        one event at least); True when the stream must end after them."""
        head, cursor, replay_end = window.head, self.cursor, self.replay_end
        if head <= cursor:
            return False
        replaying = cursor < replay_end
        end = replay_end if replaying else head  # a piece never runs from the replay into live
        if self.task is None and not self.pending_missed and (replaying or head - cursor <= LAG_LIMIT):
            # A watcher takes every event: watchers at the same cursor with the same request
            # id write the same bytes, so they share one join, which the hub counts once.
            batch = window.take_batch(cursor, end, self.prefix, self.plain)
            if batch is not None:
                parts.append(batch.body)
                self.events_sent += batch.events
                self.cursor = batch.last
                return False
        noted = self._note()
        noted.lag = head - cursor
        missed = 0
        if not replaying:  # the lag rule: live events only
            cursor, missed = skip_lag(cursor, head)
        first = min(max(cursor + 1, head - window.slots + 1), end + 1)  # older ids have left the window
        missed += first - cursor - 1
        delivered = size = 0
        ended = False
        for event_id in range(first, end + 1):
            entry = window.entry(event_id)
            if entry is None:  # the pump lost it, or the ring overwrote it mid-copy
                missed += 1
                continue
            if not self.accepts(entry):
                continue
            if missed:
                self._note_missed(missed)
                missed = 0
            self.take(entry, parts)
            size += len(parts[-1])
            delivered += 1
            if self.ends_at(entry, live=event_id > replay_end):
                end, ended = event_id, True
                break
            if size >= PIECE_BYTES:
                end = event_id
                break
        self._note_missed(missed)
        self.cursor = end
        noted.delivered += delivered
        return ended

    def _note_missed(self, missed: int) -> None:
        if missed:
            self.pending_missed += missed
            self._note().missed += missed
            self.lost = True

    def ending_from(self, snapshot: dict) -> bytes:
        """A lost task stream's ending, from its task as GetTask answers it now (and `ended`);
        b"" while the task goes on. Events it lost since the last it received are named first:
        the ending is the next thing it receives."""
        status = snapshot["status"]
        terminal = states.is_terminal(status["state"])
        if not self.ends(terminal, status["state"] == states.INPUT_REQUIRED, live=True):
            return b""
        task_id, context_id = self.task.id, self.task.context_id
        parts: list[bytes] = []
        if self.pending_missed:
            self._name_missed(parts)
        if terminal:
            for artifact in snapshot.get("artifacts", ()):
                if artifact.get("name") == events.RESPONSE_ARTIFACT_NAME:
                    parts.append(self.unnumbered(events.artifact_update(task_id, context_id, artifact)))
        parts.append(self.unnumbered(events.status_update(task_id, context_id, status)))
        self.ended = True
        return b"".join(parts)
