"""The embedded capsule: the control operations a worker's calls reach when no upstream is set.

It owns the task registry and the scenario runner (runner.py), answers each control call
(`operations`, the same table upstream.py answers in upstream mode) and turns each event a
scenario emits into encoded bytes for the ring. The sequencer numbers and writes them
(`RingWriter`); nothing here knows ids or the ring.

A task's status is recorded in the registry before its event is written, so a client that
reads the event and then calls GetTask sees the same state.
"""

from __future__ import annotations

import asyncio
import base64

import orjson

from gateway.common import records
from gateway.sequencer.capsule import messages, paging, tck
from gateway.sequencer.capsule.runner import Refusal, ScenarioRunner
from gateway.sequencer.capsule.tasks import Registry, Task
from gateway.sequencer.capsule.interfaces import RingWriter
from gateway.config.options import Config
from gateway.common.control import Caller, Op
from gateway.protocol import events, states
from gateway.protocol.errors import (INVALID_PARAMS, TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION,
                                     RpcError, task_ended)


def returns_immediately(params: object) -> bool:
    configuration = params.get("configuration") if isinstance(params, dict) else None
    return isinstance(configuration, dict) and configuration.get("returnImmediately") is True


class EmbeddedCapsule:
    def __init__(self, config: Config, writer: RingWriter):
        self.config = config
        self.writer = writer
        self.registry = Registry()
        self.runner = ScenarioRunner(config, self.registry, self)
        self._settling: dict[int, asyncio.Future] = {}  # task key -> a SendMessage awaiting it
        self.operations = {Op.SEND: self.send, Op.GET: self.get, Op.SUBSCRIBE: self.subscribe,
                           Op.LIST: self.list, Op.CANCEL: self.cancel, Op.STOP: self.stop_session,
                           Op.ATTACHMENT: self.attachment, Op.OWNER_CODE: self.owner_code}

    def start(self) -> None:
        self.runner.start()
        self.writer.set_connected(True)

    def close(self) -> None:
        """The gateway stops: nothing to let go of (tasks die with the process)."""

    # --- Emitter: a scenario's events, encoded once ---

    def status(self, task: Task, state: str, text: str | None = None, *,
               reopen: int | None = None) -> None:
        status = task.set_status(state, text)
        meta = records.status_meta(state)
        if reopen is None:
            self._publish(task, meta, orjson.dumps(events.status_update(task.id, task.context_id, status)))
        else:
            full, plain = events.reopen_status_update(task.id, task.context_id, status, reopen)
            self._publish(task, meta, orjson.dumps(full), orjson.dumps(plain))
        if meta & (records.TERMINAL | records.INPUT_REQUIRED):
            waiter = self._settling.pop(task.key, None)
            if waiter is not None:
                waiter.set_result(None)

    def frame(self, task: Task, frame: dict) -> None:
        result = events.task_frame_event(task.id, task.context_id, frame, state=task.state)
        self._publish(task, records.make_meta(task.state, records.FRAME), orjson.dumps(result))

    def response(self, task: Task, artifact: dict) -> None:
        self._publish(task, records.make_meta(task.state, 0),
                      orjson.dumps(events.artifact_update(task.id, task.context_id, artifact)))

    def _publish(self, task: Task, meta: int, full: bytes, plain: bytes | None = None) -> None:
        """One event of `task`, its record naming the task and its owner."""
        self.writer.publish(task.key, records.owned(meta, task.owner_code), full, plain)

    # --- control operations ---

    def _task(self, p: dict, task_id: object) -> Task:
        """The task `task_id` as the caller the call's params `p` name sees it."""
        return self.registry.get(task_id, Caller.of(p))

    def _refuse_streams(self, what: str) -> None:
        if self.config.lifecycle.task_acceptance == "none":
            raise RpcError(UNSUPPORTED_OPERATION, f"this capsule {what} (lifecycle.task_acceptance is none)")

    async def send(self, p: dict) -> dict:
        """SendMessage / SendStreamingMessage: a new task, or the reply to one waiting for input."""
        if p.get("streaming"):
            self._refuse_streams("does not accept streamed tasks")
        message = messages.read_message(p.get("params"))
        direct = None if p.get("streaming") else tck.message_response(message)
        if direct is not None:
            return {"message": direct}
        if message.task_id is None:
            self.registry.contexts.check(message.context_id, Caller.of(p))
            try:
                task = self.runner.accept(message, p.get("owner"))
            except Refusal as refusal:
                return {"rejected": refusal.task}
        else:
            task = self._task(p, message.task_id)
            if message.context_id is not None and message.context_id != task.context_id:
                raise RpcError(INVALID_PARAMS, f"message.contextId is not task {task.id}'s context")
            if task.ended:
                raise task_ended(UNSUPPORTED_OPERATION, task.id, task.state)
            if task.state != states.INPUT_REQUIRED:
                raise RpcError(UNSUPPORTED_OPERATION, f"task {task.id} is working and takes no message "
                                                      "now; use SubscribeToTask to follow it")
            self.status(task, states.WORKING, states.RESUMED)
            self.runner.reply(task, message)
        if tck.is_tck(message) and not p.get("streaming") and not returns_immediately(p.get("params")):
            await self._settled(task)
        return {"task": task.snapshot(), "key": task.key}

    async def _settled(self, task: Task) -> None:
        """Until the task ends or asks for input: how A2A's SendMessage answers unless told
        `returnImmediately`, which the TCK's tests expect; our SendMessage otherwise answers
        at once, so only the TCK's scripts wait."""
        if not task.ended:
            waiter = self._settling.setdefault(task.key, asyncio.get_running_loop().create_future())
            await asyncio.shield(waiter)

    async def get(self, p: dict) -> dict:
        task = self._task(p, p.get("id"))
        return {"task": task.snapshot(), "key": task.key}

    async def subscribe(self, p: dict) -> dict:
        self._refuse_streams("serves no task streams")
        task = self._task(p, p.get("id"))
        if task.ended:
            raise task_ended(UNSUPPORTED_OPERATION, task.id, task.state)
        return {"task": task.snapshot(), "key": task.key}

    async def list(self, p: dict) -> dict:
        params = p.get("params") or {}
        start, size = paging.window(params)
        context, state = params.get("contextId"), params.get("status")
        tasks = [t for t in self.registry.visible(Caller.of(p))
                 if (context is None or t.context_id == context) and (state is None or t.state == state)]
        tasks.reverse()  # most recent first
        answer = paging.page(tasks, start, size)
        return {**answer, "tasks": [t.snapshot() for t in answer["tasks"]]}

    async def cancel(self, p: dict) -> dict:
        task = self._task(p, p.get("id"))
        if task.ended:
            raise task_ended(TASK_NOT_CANCELABLE, task.id, task.state)
        self.runner.cancel(task)
        if task.runner is not None and not task.runner.done():
            await asyncio.wait([task.runner])
        return task.snapshot()

    async def owner_code(self, p: dict) -> dict:
        """The code a caller's tasks carry in ring records (murgw.WatchOwnTasks filters by it)."""
        return {"code": self.registry.owner_code(Caller.of(p).owner)}

    async def stop_session(self, p: dict) -> dict:
        await self.runner.stop_session()
        self.writer.close_session()
        return {}

    async def attachment(self, p: dict) -> dict | None:
        try:
            task = self._task(p, p.get("task_id"))
        except RpcError:
            return None
        found = task.attachments.get(p.get("sha256", ""))
        if found is None:
            return None
        return {"mediaType": found[0], "data": base64.b64encode(found[1]).decode()}
