"""A worker's pump: the sequencer's wake-ups, when the next pass runs, and the copy of each new
ring record into the window.

The sequencer wakes the worker (one byte on its wake socket) when events are written; the
pump waits as long as the coalescing policy says (coalesce.py: 0 under light load, longer
while passes fill the loop, so events written meanwhile travel together), copies each new
record once into the window (`copy`) and hands the pass (hub.py) the keys of what it copied,
and their owners' tags (records.owner_tag), `sync`. An opening that finds the ring ahead of
the window copies too (`copy`, from `Hub.reading_point`), and runs no pass: the copy is owed to
the other streams, and the pass due next (scheduled then) writes it to them, once a turn, not
once an opening.

Wake-up protocol (the armed words, gateway/common/board.py): before sleeping the worker sets its
armed word and re-reads the head; the sequencer sends one byte only to armed workers. x86-64
may reorder a store before a later load (store buffering), so an armed flag and a head
published at the same instant can miss each other: a slow poll (`tuning.POLL_SECONDS`)
closes that window.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Callable

from gateway import tuning
from gateway.common import records
from gateway.common.board import Board
from gateway.worker.delivery.coalesce import next_delay
from gateway.worker.delivery.window import Window
from shm import Ring


class Pump:
    def __init__(self, ring: Ring, wake_sock: socket.socket, index: int, window: Window, *,
                 run_pass: Callable[[set[int]], None], new_session: Callable[[], None],
                 before_copy: Callable[[], None], pass_seconds: Callable[[], float]):
        self.ring = ring
        self.board = Board(ring.control)
        self.wake_sock = wake_sock
        self.index = index
        self.window = window
        self.epoch = ring.epoch
        self._run_pass = run_pass  # (keys copied since the last pass): write the streams
        self._pass_seconds = pass_seconds  # () -> the seconds the pass's slices took since last asked
        self._new_session = new_session  # the ring began a new session: the window was cleared
        self._before_copy = before_copy  # the window's batches are about to go: count them
        self._owed: set[int] | None = None  # keys copied by an opening, not yet passed
        self._poll: asyncio.TimerHandle | None = None
        self._pending_sync: asyncio.Handle | None = None
        self._pending_due = 0.0  # the loop time `_pending_sync` runs at
        # Adaptive coalescing (coalesce.py): the wait before the next pass after a wake-up,
        # from how much of the loop the last pass took, and when that pass began.
        self._delay = 0.0
        self._pass_started = time.perf_counter()
        self._arrived = 0  # ids an opening copied since the last pass (coalesce.py counts them)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.wake_sock.setblocking(False)
        self._loop.add_reader(self.wake_sock.fileno(), self._on_wake)
        self.window.head = max(0, self.ring.head - self.window.slots)
        self.sync()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.wake_sock.fileno())
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
        waiting = self.ring.head - self.window.head + self._arrived
        delay = self._delay if waiting < tuning.COALESCE_MAX_EVENTS else 0.0
        loop = self._loop
        assert loop is not None  # started: a wake-up comes through its reader
        pending = self._pending_sync
        if pending is not None:
            # uvloop answers call_later(0, ...) with a plain Handle, which has no when(): the
            # due time is kept here
            if delay or self._pending_due <= loop.time():
                return  # the pass already due serves this wake-up too
            pending.cancel()
        self._pending_due = loop.time() + delay
        self._pending_sync = loop.call_later(delay, self._coalesced_sync)

    def _coalesced_sync(self) -> None:
        self._pending_sync = None
        self.sync()

    def _on_poll(self) -> None:
        self._poll = None
        if self._pending_sync is None:  # else a wake-up came and its pass is due: no wake-up was missed
            self.sync()

    def ring_moved(self) -> bool:
        """The ring holds events the window has not copied, or began a new session."""
        return self.ring.head != self.window.head or self.ring.epoch != self.epoch

    def copy(self) -> bool:
        """Copy every new record into the window, and what the session's words say now, with
        no pass: an opening's (`Hub.reading_point`). What it copied is owed to the other
        streams: the pass due next writes it. True when anything changed."""
        keys: set[int] = set()
        changed = self._copy(keys)
        if changed:
            if self._owed is None:
                self._owed = keys
            else:
                self._owed |= keys
            self._schedule_sync()
        return changed

    def _copy(self, keys: set[int]) -> bool:
        """The records after the window's head up to the ring's, their keys added to `keys`,
        and the session's words: True when the window moved or the words changed."""
        ring, board, window = self.ring, self.board, self.window
        if ring.epoch != self.epoch:
            self.epoch = ring.epoch
            window.clear()
            self._new_session()
        target = ring.head
        arrived = max(0, target - window.head)
        if arrived:
            self._before_copy()
            window.batches.clear()
            for event_id in range(max(window.head + 1, target - window.slots + 1), target + 1):
                record = ring.read(event_id)
                if record is None:
                    window.drop(event_id)
                else:
                    entry = window.put(event_id, record.key, record.meta, record.data)
                    keys.add(entry.key)
                    keys.add(records.owner_tag(records.meta_owner(entry.meta)))
            window.head = target
            self._arrived += arrived
        window.oldest = ring.oldest
        closed_at = board.session_closed
        closing = window.closing or board.closing
        if closed_at != window.session_closed_at or closing != window.closing:
            window.session_closed_at, window.closing = closed_at, closing
            return True
        return arrived > 0

    def sync(self) -> None:
        """Copy every new record into the window, then write the streams it concerns: the
        pass, when anything changed since the last one (an idle poll writes nothing)."""
        started = time.perf_counter()
        self.board.disarm(self.index)
        owed, self._owed = self._owed, None
        keys = owed if owed is not None else set()
        changed = self._copy(keys)
        copied = time.perf_counter()
        if changed or owed is not None:
            self._run_pass(keys)
        # Every sync feeds the policy, idle polls included: a poll's share of the loop is about
        # 0, so the delay a busy spell left decays to 0 within a few polls of quiet, rather
        # than holding until the next events arrive. A pass is written a slice a turn (hub.py):
        # its cost is every slice's since the last sync (this one's first included), not the
        # first slice's alone, or a pass over many streams would look cheap and never coalesce.
        arrived, self._arrived = self._arrived, 0
        self._delay = next_delay(copied - started + self._pass_seconds(), started - self._pass_started,
                                 self._delay, arrived)
        self._pass_started = started
        self.board.arm(self.index)
        if self.ring_moved():
            self._schedule_sync()  # written while we copied: the next batch
        elif self._poll is None and self._loop is not None:  # a sync runs on the started loop
            self._poll = self._loop.call_later(tuning.POLL_SECONDS, self._on_poll)
