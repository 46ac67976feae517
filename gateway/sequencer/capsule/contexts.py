"""A context belongs to its callers: who holds tasks in each context the capsule has seen.

With authentication on, a message that names a `contextId` holding only tasks the caller
cannot see is refused exactly like an unknown task (-32001): otherwise a second token's task
could join the first's conversation (a `threaded` capsule keeps one conversation a context).
A context never seen here (a client's own fresh id) is taken as before. Embedded and upstream
mode alike record a context's owners as each task is created through this gateway.
"""

from __future__ import annotations

from gateway.common.control import Caller
from gateway.protocol.errors import TASK_NOT_FOUND, RpcError


class ContextOwners:
    """Context id -> the owner names of its tasks (None: a task no token created)."""

    def __init__(self) -> None:
        self._owners: dict[str, set[str | None]] = {}

    def add(self, context_id: object, owner: str | None) -> None:
        if isinstance(context_id, str):  # an upstream's task without one names no context
            self._owners.setdefault(context_id, set()).add(owner)

    def check(self, context_id: object, caller: Caller) -> None:
        """Raise -32001 where `caller` sees none of the tasks of a context seen before."""
        owners = self._owners.get(context_id) if isinstance(context_id, str) else None
        if owners is not None and not any(caller.sees(owner) for owner in owners):
            raise RpcError(TASK_NOT_FOUND, f"context {context_id} not found")

    def clear(self) -> None:
        self._owners.clear()
