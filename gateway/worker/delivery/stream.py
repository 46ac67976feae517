"""One open SSE connection: which bytes it writes, in which state it is, and when it ends. No I/O.

Everything that moves a stream lives in this file: its states, what moves it between them
(`TRANSITIONS`), which events it takes (`accepts`, `pass_over`), the lag rule's application,
its replay and how it ends. The hub (hub.py) drives it and owns all its I/O: the sink, the
driver's wait, the place in the catch-up queue, the heartbeat due (`drivers.Served`). The
stream never reads a clock, a socket or a counter: each step takes what it needs as
arguments and returns what happened, and the hub applies that with `move`.

    state     what it means                                      who acts
    OPENING   made by the opening (app); its opening bytes       the hub writes the opening
              (ack or task, gap) not yet written
    PARKED    nothing needs its driver                           the hub's pass and catch-up queue
                                                                 write for it; its driver waits
    BLOCKED   its sink holds bytes: nothing is written until     its driver waits for the drain
              they have left
    CHECKING  a task stream that lost events had a heartbeat:    its driver drains, then asks the
              its ending may be among them                       sequencer for the task (`ending_from`)
    ENDING    nothing more is written                            its driver ends the body

    happened  what moves it
    OPENED    its opening was written and the sink takes more
    FULL      a write left its sink full (or the client gone)
    DRAINED   its sink's bytes have left
    CHECK     a heartbeat found it lost events (`gather`)
    GOES_ON   the task it looked up goes on
    END       its rules ended it (`gather`, `ending_from`), or the client left, the worker
              drains or a reload revoked it (the hub)

`gather` returns a delivery, (body, happened, noted): the bytes due now, END or CHECK or
None, and what the hub's metrics count of its own walk or heartbeat (a `Noted`, made only
when there is something to note: a watcher taking a shared batch carries none, and the
window counts that batch's takers itself).

A stream owns an integer cursor into the worker's window (window.py). When the hub asks
(`gather`), it takes every pending event its filter accepts, a due heartbeat and the
session's end, and answers them as one body. A task stream ends after its task's terminal
status, and a SendStreamingMessage stream also after a live input-required one (`ends`).
It applies the rule of protocol/lag.py, stated there once in the spec's words: its replay
is the buffer as it was when the request was read, written whole (`start_replay` holds the
window's view of it, window.Replay, until the last replayed event is written), then its live
events, of which it loses only the oldest beyond the queue of 128, named by one `lagged`
frame on an activated connection before the next event it receives. A client that stops
reading fills its transport buffer past the high-water mark: its sink reports itself
blocked, the hub stops writing to it until it drains, its cursor stays behind, so it lags
rather than being buffered without bound.

The lapped-replay budget: a stream still replaying whose view the ring has lapped
(`replay_lapped`: the window no longer holds the entry it owes next, so its view alone keeps
evicted entries alive) cannot keep up with the ring. What such views keep alive is bounded per
worker in bytes, however fast or slowly their streams read: past the budget, the streams of
the oldest lapped views end, access reason "lapped" (lapped.py, `Hub._bound_lapped`). A
stream whose view the ring has not lapped is never cut, however slowly it reads, nor a lapped
one while the budget holds (SECURITY.md, Limits).

The replay is walked from the same cursor as live events, a piece at a time (at most
window.PIECE_BYTES a write): the opening holds only the head frames (ack or task, gap), and
the replay's view holds references, never a copy of the buffer. Each event is written once,
in order. A hole in the window (a record the ring overwrote before the pump copied it) is
lost like a live event: counted and named by a `lagged` frame before the next event.

A task stream that lost events may have lost its ending: from the first loss on, each
heartbeat it writes answers CHECK, the hub looks its task up, and `ending_from` answers the
ending found (spec "Events a connection misses").
"""

from __future__ import annotations

import enum

import orjson

from gateway.common import records
from gateway.protocol import events, sse, states
from gateway.protocol.lag import LAG_LIMIT, skip_lag
from gateway.worker.delivery.window import PIECE_BYTES, Entry, Replay, Window


class State(enum.Enum):
    OPENING = "opening"
    PARKED = "parked"
    BLOCKED = "blocked"
    CHECKING = "checking"
    ENDING = "ending"


class Happened(enum.Enum):
    OPENED = "opened"
    FULL = "full"
    DRAINED = "drained"
    CHECK = "check"
    GOES_ON = "goes on"
    END = "end"


OPENING, PARKED, BLOCKED, CHECKING, ENDING = State
OPENED, FULL, DRAINED, CHECK, GOES_ON, END = Happened

# Every move a stream makes; anything else is a bug (`StreamStateError`). A check found due
# while the sink is full is made once it drained (CHECKING drains first); a stream may be
# ended in any state, more than once.
TRANSITIONS: dict[State, dict[Happened, State]] = {
    OPENING: {OPENED: PARKED, FULL: BLOCKED, END: ENDING},
    PARKED: {FULL: BLOCKED, CHECK: CHECKING, END: ENDING},
    BLOCKED: {DRAINED: PARKED, END: ENDING},
    CHECKING: {GOES_ON: PARKED, END: ENDING},
    ENDING: {END: ENDING},
}


class StreamStateError(RuntimeError):
    """A move the table does not have."""


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
    """What one step of a stream noted for the hub's metrics (its own walk of the window, the
    heartbeat it wrote, the lagged frames): in its delivery, made only when there is something."""

    __slots__ = ("delivered", "lag", "missed", "lagged_frames", "beat_due")

    def __init__(self) -> None:
        self.delivered = 0
        self.lag = -1  # events behind the head when it walked the window (-1: it did not)
        self.missed = 0
        self.lagged_frames = 0
        self.beat_due: float | None = None  # the due time of the heartbeat it wrote


# (body, END / CHECK / None, Noted or None): what a step wrote and what happened. A plain
# tuple: the pass makes one per stream written, and a tuple is the cheapest record there is.
Delivery = tuple[bytes, "Happened | None", "Noted | None"]


class Stream:
    # Every open stream holds one of these for as long as it is open: slots, and only what
    # it reads (the request id lives inside `prefix`, activation is `not plain`).
    __slots__ = ("endpoint", "prefix", "task", "owner", "plain", "state", "cursor", "replay_end", "replay",
                 "opening", "lost", "last_state", "pending_missed", "session_changed", "events_sent")

    def __init__(self, *, endpoint: str, rpc_id_json: bytes, task: TaskView | None = None,
                 owner: int | None = None, activated: bool = True, cursor: int = 0):
        self.endpoint = endpoint
        self.prefix = sse.rpc_prefix(rpc_id_json)
        self.task = task
        self.owner = owner  # murgw.WatchOwnTasks: the code its owner's tasks carry in records
        self.plain = not activated
        self.state = OPENING
        self.cursor = cursor  # the id of the last event it consumed (taken, skipped or lost)
        self.replay_end = 0  # the head when the request was read: ids up to it are the replay
        self.replay: Replay | None = None  # the entries it still owes of its replay (`start_replay`)
        self.opening = b""  # written first (ack or task, gap): set by the opening, taken once
        self.lost = False  # a task stream lost an event: each heartbeat checks its task
        self.last_state = task.opening_state if task else None
        self.pending_missed = 0  # lost events its next `lagged` frame names
        self.session_changed = False  # the ring started a new session (`new_session`)
        self.events_sent = 0  # numbered events taken, for its access-log line (access_log.py)

    @property
    def activated(self) -> bool:
        return not self.plain

    @property
    def ended(self) -> bool:
        return self.state is ENDING

    def move(self, happened: Happened) -> None:
        """The state `happened` moves it to (`TRANSITIONS`)."""
        try:
            self.state = TRANSITIONS[self.state][happened]
        except KeyError:
            raise StreamStateError(f"a stream {self.state.value} cannot be {happened.value}") from None

    def take_opening(self) -> bytes:
        """Its opening, dropped here: written once, it is not held for as long as it is open."""
        opening, self.opening = self.opening, b""
        return opening

    def new_session(self) -> None:
        """The ring started a new session: its next `gather` ends it."""
        self.session_changed = True

    # --- the bytes ---

    def unnumbered(self, result: dict) -> bytes:
        return sse.join_event(sse.UNNUMBERED_HEAD, self.prefix, orjson.dumps(result))

    def connection_frame(self, frame: dict) -> bytes:
        """gap / lagged / connection-ack / capsule-closed in the carrier this stream uses."""
        if self.task is None:
            return self.unnumbered(events.taskless_frame_event(frame))
        return self.unnumbered(events.task_frame_event(
            self.task.id, self.task.context_id, frame, state=self.last_state or states.WORKING))  # a task's: never None

    # --- which events it takes: its filter, here alone ---

    def accepts(self, entry: Entry) -> bool:
        """A watcher takes every event (one of an owner's tasks: theirs and those of no task);
        a task stream its task's, and a plain one none of its frames."""
        if self.task is None:
            return self.owner is None or not entry.key or records.meta_owner(entry.meta) == self.owner
        return entry.key == self.task.key and not (self.plain and entry.meta & records.FRAME)

    def pass_over(self, keys: set[int], head: int) -> bool:
        """The hub's pass copied events up to `head` whose keys (and owners' tags) are `keys`,
        and this stream had consumed every event before them: when none is its task's (its
        owner's, or of no task), it accepts none of them and is past them without a walk (True)."""
        if self.task is None or self.task.key in keys:
            if self.owner is None or 0 in keys or records.owner_tag(self.owner) in keys:
                return False
        self.cursor = head
        return True

    def ends(self, terminal: int, input_required: int, live: bool) -> bool:  # flags: any truthy value
        """How a task stream ends: after its task's terminal status, and a SendStreamingMessage
        stream also after an input-required status it receives live (not replayed)."""
        if self.task is None:
            return False
        return bool(terminal) or (live and self.task.ends_on_input and bool(input_required))

    def ends_at(self, entry: Entry, live: bool) -> bool:
        meta = entry.meta
        return self.ends(meta & records.TERMINAL, meta & records.INPUT_REQUIRED, live)

    # --- its steps ---

    def start_replay(self, window: Window, after: int) -> None:
        """Replay the buffered events with id > after (this stream's filter), up to the head
        now; the pieces are written from the window's view of them (held here until the last
        is written, whatever the ring does meanwhile) as the hub gets to them (`gather`)."""
        self.replay_end = window.head
        self.cursor = min(max(after, window.oldest - 1), window.head)
        if self.cursor < self.replay_end:
            self.replay = window.replay_view()

    @property
    def replaying(self) -> bool:
        return self.cursor < self.replay_end

    def replay_lapped(self, window: Window) -> bool:
        """Still replaying, and the window no longer holds the next entry it owes: its view
        alone keeps the ring's evicted entries alive (the lapped-replay budget, above)."""
        return self.replaying and window.head - self.cursor > window.slots

    def behind(self, window: Window) -> bool:
        """Events are pending after the last write: a replay, or a catch-up past one piece."""
        return window.head > self.cursor

    def has_work(self, window: Window, beat_due: float | None) -> bool:
        return (window.head > self.cursor or beat_due is not None or self.session_changed
                or bool(window.session_closed_at))

    def gather(self, window: Window, beat_due: float | None = None, events_too: bool = True) -> Delivery:
        """What is due now: pending events (one piece; none when not `events_too`: a queued
        stream's events wait for its turn, a heartbeat never does), the heartbeat due since
        `beat_due` (None: none is), the session's end. What happened: END when it must end
        after this body, CHECK when a lost task stream must have its task looked up."""
        parts: list[bytes] = []
        noted: Noted | None = None
        ended = False
        # A task stream's replay piece may hold none of its task's events: the live events
        # after it are then this write's piece (at most two walks: replay, live). A new
        # session writes nothing more of the old one.
        while events_too and not parts and not ended and not self.session_changed and self.behind(window):
            if self._take_batch(window, parts):
                break
            if noted is None:
                noted = Noted()
            ended = self._walk(window, parts, noted)
        if self.replay is not None and self.cursor >= self.replay_end:
            self.replay = None  # written whole: its entries are let go
        happened = END if ended else None
        if beat_due is not None:
            if noted is None:
                noted = Noted()
            noted.beat_due = beat_due
            parts.append(sse.HEARTBEAT)
            if self.lost and self.task is not None and not ended:
                happened = CHECK
        closed_at = window.session_closed_at
        if self.session_changed or (closed_at and self.cursor >= closed_at - 1):
            if self.task is None:
                parts.append(self.connection_frame(events.capsule_closed_frame()))
            happened = END
        return b"".join(parts), happened, noted

    def _take_batch(self, window: Window, parts: list[bytes]) -> bool:
        """A watcher takes every event: watchers at the same cursor with the same request id
        write the same bytes, so they share one join (`Window.take_batch`), which the window
        counts by its takers. False when this stream walks the window itself instead."""
        head, cursor, replay_end = window.head, self.cursor, self.replay_end
        replaying = cursor < replay_end
        if (self.task is not None or self.owner is not None or self.pending_missed
                or not (replaying or head - cursor <= LAG_LIMIT)):
            return False
        batch = (window.take_batch(cursor, replay_end, self.prefix, self.plain, self.replay) if replaying
                 else window.take_batch(cursor, head, self.prefix, self.plain))
        if batch is None:
            return False
        parts.append(batch.body)
        self.events_sent += batch.events
        self.cursor = batch.last
        return True

    def _walk(self, window: Window, parts: list[bytes], noted: Noted) -> bool:
        """The pending events this stream accepts, at most a piece of them (window.PIECE_BYTES,
        one event at least), walked one by one; True when the stream must end after them."""
        head, cursor, replay_end = window.head, self.cursor, self.replay_end
        replaying = cursor < replay_end
        end = replay_end if replaying else head  # a piece never runs from the replay into live
        noted.lag = head - cursor
        source: Replay | Window
        if replaying:  # its view holds every event it owes: the lag rule is for live events
            assert self.replay is not None  # start_replay set it; written whole, it is let go
            source, first, missed = self.replay, cursor + 1, 0
        else:
            source = window
            cursor, missed = skip_lag(cursor, head)
            first = min(max(cursor + 1, head - window.slots + 1), end + 1)  # older ids have left the window
            missed += first - cursor - 1
        delivered = size = 0
        ended = False
        for event_id in range(first, end + 1):
            entry = source.entry(event_id)
            if entry is None:  # the pump lost it, or the ring overwrote it mid-copy
                missed += 1
                continue
            if not self.accepts(entry):
                continue
            if missed:
                self._lose(missed, noted)
                missed = 0
            self._take(entry, parts, noted)
            size += len(parts[-1])
            delivered += 1
            if self.ends_at(entry, live=event_id > replay_end):
                end, ended = event_id, True
                break
            if size >= PIECE_BYTES:
                end = event_id
                break
        self._lose(missed, noted)
        self.cursor = end
        noted.delivered += delivered
        return ended

    def _take(self, entry: Entry, parts: list[bytes], noted: Noted) -> None:
        if self.pending_missed:
            self._name_missed(parts, noted)
        parts.append(entry.wire(self.prefix, self.plain))
        self.events_sent += 1
        if entry.meta & records.STATUS:
            self.last_state = records.meta_state(entry.meta)

    def _lose(self, missed: int, noted: Noted) -> None:
        if missed:
            self.pending_missed += missed
            noted.missed += missed
            self.lost = True

    def _name_missed(self, parts: list[bytes], noted: Noted) -> None:
        """Before the next event it receives, an activated stream is told what it lost."""
        if not self.plain:
            parts.append(self.connection_frame(events.lagged_frame(self.pending_missed)))
            noted.lagged_frames += 1
        self.pending_missed = 0

    def ending_from(self, snapshot: dict) -> Delivery:
        """A lost task stream's ending, from its task as GetTask answers it now (END), or
        nothing while the task goes on (None). Events it lost since the last it received are
        named first: the ending is the next thing it receives."""
        status = snapshot["status"]
        terminal = states.is_terminal(status["state"])
        if self.task is None or not self.ends(terminal, status["state"] == states.INPUT_REQUIRED, live=True):
            return b"", None, None
        task_id, context_id = self.task.id, self.task.context_id
        parts: list[bytes] = []
        noted = None
        if self.pending_missed:
            noted = Noted()
            self._name_missed(parts, noted)
        if terminal:
            for artifact in snapshot.get("artifacts", ()):
                if artifact.get("name") == events.RESPONSE_ARTIFACT_NAME:
                    parts.append(self.unnumbered(events.artifact_update(task_id, context_id, artifact)))
        parts.append(self.unnumbered(events.status_update(task_id, context_id, status)))
        return b"".join(parts), END, noted
