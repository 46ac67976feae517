"""The task registry: every task the capsule accepted, as GetTask reports it.

The registry is the single source of a task's state. A status is recorded here *before*
its event is written to the ring, so a client that reads the event and then calls GetTask
sees the same state (spec: "It is written after GetTask answers the same state").
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Iterator

from gateway.sequencer.capsule.contexts import ContextOwners
from gateway.common.control import Caller
from gateway.protocol import events, ids, states
from gateway.protocol.errors import INVALID_PARAMS, TASK_NOT_FOUND, RpcError


@dataclass
class Task:
    key: int
    id: str
    context_id: str
    owner: str | None
    status: dict
    owner_code: int = 0  # `Registry.owner_code` of its owner, in each of its ring records' meta
    artifacts: list[dict] = field(default_factory=list)
    attachments: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    started: bool = False
    runner: asyncio.Task | None = None
    reply: asyncio.Future | None = None  # set while the task waits for input

    @property
    def state(self) -> str:
        return self.status["state"]

    @property
    def ended(self) -> bool:
        return states.is_terminal(self.state)

    def snapshot(self) -> dict:
        """The task exactly as GetTask answers it now."""
        return events.task(self.id, self.context_id, self.status, self.artifacts)

    def set_status(self, state: str, text: str | None = None) -> dict:
        self.status = events.task_status(
            state, events.timestamp(), text, task_id=self.id, context_id=self.context_id)
        return self.status


class Registry:
    """Tasks by id, in creation order; keys are small integers for ring records, and so are
    owner codes: one per owner name, kept for the session, so a record names its task's owner
    in its meta (common/records.py) and a stream of one caller's tasks filters by it."""

    def __init__(self) -> None:
        self._by_id: dict[str, Task] = {}
        self._keys = itertools.count(1)
        self._owner_codes: dict[str, int] = {}
        self.contexts = ContextOwners()

    def owner_code(self, owner: str | None) -> int:
        """The code of `owner`'s tasks in ring records, given on first use (0: no owner)."""
        if owner is None:
            return 0
        return self._owner_codes.setdefault(owner, len(self._owner_codes) + 1)

    def create(self, owner: str | None, context_id: str | None = None) -> Task:
        task_id = ids.new_task_id()
        task = Task(next(self._keys), task_id, context_id or ids.new_context_id(), owner,
                    status={}, owner_code=self.owner_code(owner))
        task.set_status(states.SUBMITTED)
        self._by_id[task_id] = task
        self.contexts.add(task.context_id, owner)
        return task

    def get(self, task_id: object, caller: Caller) -> Task:
        """The task the caller sees; an unseen task is answered exactly like an unknown one."""
        if not isinstance(task_id, str) or not task_id:
            raise RpcError(INVALID_PARAMS, "params.id must be a non-empty string")
        task = self._by_id.get(task_id)
        if task is None or not caller.sees(task.owner):
            raise RpcError(TASK_NOT_FOUND, f"task {task_id} not found")
        return task

    def visible(self, caller: Caller) -> Iterator[Task]:
        return (t for t in self._by_id.values() if caller.sees(t.owner))

    def live(self) -> Iterator[Task]:
        return (t for t in self._by_id.values() if not t.ended)
