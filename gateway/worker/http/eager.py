"""Run a coroutine at once, and make a task only of what is left when it must wait.

Why: the front (front.py) runs the worker's app for each request it reads. A whole
`POST /` that the front's at-once path does not take (`Front._at_once`: a WatchSession's
opening that no limit asks the sequencer about) often awaits nothing that is not ready
either (a refusal, a JSON-RPC error, an opening whose limits are not reached), so it can run
inside the `data_received` that read its body. A task per
opening cost its creation, its scheduling and a turn of the loop before the first byte, and
its registration in asyncio's set of tasks. This is what Python 3.12's eager tasks do
(`eager_start`); the gateway runs on 3.11 too, so it is written here, on the coroutine
protocol alone (`send`, `throw`).

The eager part runs with no current task: it must not use `asyncio.timeout` (the front hands
the app its body whole, so the body timer is not reached) or anything else that asks for one
(tests/e2e/test_front_requests.py and test_front_at_once.py run real requests through it,
and fail if one does).
Python 3.12's `asyncio.eager_task_factory` would give it a task; the gateway runs on 3.11, so
the shim stays.
Once it waits, the rest runs in a task that waits on the very future the coroutine yielded,
so cancelling that task cancels the wait, as with any task.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine


def start(loop: asyncio.AbstractEventLoop, coro: Coroutine) -> asyncio.Task | None:
    """Run `coro` until it finishes (None) or first waits (the task that runs the rest).
    An exception it raises within the eager part propagates to the caller."""
    try:
        waited = coro.send(None)
    except StopIteration:
        return None
    return loop.create_task(_rest(coro, waited))


async def _rest(coro: Coroutine, waited: Any) -> Any:
    return await _Resumed(coro, waited)


class _Resumed:
    """Awaiting it goes on with a coroutine suspended on `waited`: what it yields goes to the
    task, what the task sends or throws goes back in (as `await coro` would, had it not
    started)."""

    __slots__ = ("coro", "waited")

    def __init__(self, coro: Coroutine, waited: Any):
        self.coro, self.waited = coro, waited

    def __await__(self):
        coro, waited = self.coro, self.waited
        while True:
            try:
                sent = yield waited
            except BaseException as error:  # the task was cancelled, or something thrown in
                try:
                    waited = coro.throw(error)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waited = coro.send(sent)
                except StopIteration as stop:
                    return stop.value
