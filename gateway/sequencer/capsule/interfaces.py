"""Between the sequencer and its capsule: what each offers the other.

The sequencer is the single writer of event ids and of the ring; a capsule (embedded.py or
upstream.py) holds a `RingWriter` and never the sequencer itself, so neither imports the
other. The sequencer holds a `Capsule`: started and closed with it, answering each control
call from its table of operations. `Emitter` is what the embedded capsule offers its
scenarios in turn: each call records, encodes and writes one event of a task.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Mapping, Protocol

from gateway.sequencer.capsule.tasks import Task
from gateway.common.control import Op


class Capsule(Protocol):
    @property
    def operations(self) -> Mapping[Op, Callable[[dict], Awaitable[object]]]: ...  # the control calls it answers

    def start(self) -> None: ...

    def close(self) -> None: ...


class RingWriter(Protocol):
    def publish(self, key: int, meta: int, full: bytes, plain: bytes | None = None) -> None:
        """Write one encoded event under the next id (ids are the sequencer's)."""

    def append_raw(self, event_id: int, key: int, meta: int, full: bytes, plain: bytes | None) -> None:
        """Write one encoded event under `event_id` (an upstream's id, adopted verbatim)."""

    def new_session(self) -> None:
        """The ids restarted: an empty ring under a new epoch; open streams end."""

    def close_session(self) -> None:
        """The capsule's stream ended: watchers get everything written, then capsule-closed."""

    def set_connected(self, up: bool) -> None:
        """Whether the capsule is live (`/readyz`)."""

    def set_conversation(self, mode: str) -> None:
        """The upstream's conversationMode, which every worker's connection-ack repeats."""


class Emitter(Protocol):
    def status(self, task: Task, state: str, text: str | None = None, *,
               reopen: int | None = None) -> None: ...

    def frame(self, task: Task, frame: dict) -> None: ...

    def response(self, task: Task, artifact: dict) -> None: ...
