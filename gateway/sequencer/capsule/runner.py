"""The embedded capsule's runner: each task's scenario, run as a real capsule would, for demos
and tests.

A new task's first text chooses its scenario (`scripts.py`); a ``messageId`` starting
``tck-`` runs the A2A TCK's scripts instead (`tck.py`). Every scenario writes its events in
the spec's "Event order within a task" and ends in exactly one terminal status, recorded in
the registry before it is written. Turns are numbered across every attempt of a task.

Tasks run concurrently up to ``lifecycle.max_running_tasks`` (a setting of ours; the spec
leaves a capsule's concurrency to it); beyond that they wait in a FIFO queue, and a
queued task that is canceled ends ``task canceled before it started``. Live tasks beyond
``lifecycle.max_queued_tasks`` are rejected at the door.
"""

from __future__ import annotations

import asyncio
import collections
import time

from gateway.sequencer.capsule import tck
from gateway.sequencer.capsule.attempt import Attempt, MaxTurns
from gateway.sequencer.capsule.messages import UserMessage
from gateway.sequencer.capsule.scripts import SCENARIO_ERROR, SCENARIOS, ScenarioError, check_limits, parse_scenario
from gateway.sequencer.capsule.tasks import Registry, Task
from gateway.sequencer.capsule.interfaces import Emitter
from gateway.config.options import Config
from gateway.protocol import events, ids, states


class Refusal(Exception):
    """The door refuses a new task: the one REJECTED task the caller is answered with."""

    def __init__(self, task: dict):
        super().__init__(task["status"]["message"]["parts"][0]["text"])
        self.task = task


class ScenarioRunner:
    """Runs tasks from their first message; the embedded capsule (embedded.py) calls in,
    events go out by `emit`."""

    def __init__(self, config: Config, registry: Registry, emit: Emitter):
        self.config = config
        self.registry = registry
        self.emit = emit
        self.closed = False
        self._queue: collections.deque[tuple[Task, UserMessage]] = collections.deque()
        self._running = 0
        self._load_task: asyncio.Task | None = None

    def start(self) -> None:
        if self.config.sim_load > 0:
            task = self.registry.create(owner=None)
            task.started = True
            task.runner = asyncio.create_task(self._run_load(task))

    def rejected(self, message: UserMessage, text: str) -> Refusal:
        """The REJECTED task a refused message is answered with; it is not kept."""
        task = Task(0, ids.new_task_id(), message.context_id or ids.new_context_id(), None,
                    status={})
        task.set_status(states.REJECTED, text)
        return Refusal(task.snapshot())

    def accept(self, message: UserMessage, owner: str | None) -> Task:
        """Take a new task: queued or started; raises Refusal when the door has no room."""
        if self.closed:
            raise self.rejected(message, states.REJECTED_CLOSING)
        if sum(1 for _ in self.registry.live()) >= self.config.lifecycle.max_queued_tasks:
            raise self.rejected(message, states.REJECTED_BUSY)
        task = self.registry.create(owner, message.context_id)
        self._queue.append((task, message))
        asyncio.get_running_loop().call_soon(self._start_queued)
        return task

    def reply(self, task: Task, message: UserMessage) -> None:
        """Deliver a reply to a task waiting for input."""
        if task.reply is not None and not task.reply.done():
            task.reply.set_result(message)

    def _start_queued(self) -> None:
        while self._queue and self._running < self.config.lifecycle.max_running_tasks:
            task, message = self._queue.popleft()
            if task.ended:
                continue
            task.started = True
            self._running += 1
            task.runner = asyncio.create_task(self._run(task, message))

    async def _run(self, task: Task, message: UserMessage) -> None:
        attempt = Attempt(self.config, self.emit, task, message)
        try:
            if tck.is_tck(message):
                await tck.tck_script(attempt, {})
            else:
                name, options = parse_scenario(message.text)
                check_limits(name, options, self.config.inference.max_turns)
                await SCENARIOS[name](attempt, options)
        except ScenarioError as exc:  # written before the task did anything
            attempt.fail(states.task_failed(SCENARIO_ERROR, str(exc)))
        except asyncio.CancelledError:
            if not task.ended:
                self.emit.status(task, states.CANCELED, states.TASK_CANCELED)
        except MaxTurns:
            attempt.fail(states.max_turns_exceeded(self.config.inference.max_turns))
        except Exception as exc:  # a scenario bug still ends the task in one final status
            if not task.ended:
                attempt.fail(f"error[internal]: {exc}")
        finally:
            self._running -= 1
            self._start_queued()

    async def _run_load(self, task: Task) -> None:
        """`--sim-load`: RATE text frames a second, each text starting with its encode time."""
        rate, pad = self.config.sim_load, self.config.sim_load_size
        self.emit.status(task, states.WORKING, states.inference_turn(1))
        started, sent = time.monotonic(), 0
        try:
            while True:
                due = int((time.monotonic() - started) * rate) - sent
                for _ in range(max(0, due)):
                    stamp = f"{time.time_ns()} "
                    self.emit.frame(task, events.text_frame(stamp + "x" * max(0, pad - len(stamp)), False))
                sent += max(0, due)
                await asyncio.sleep(min(0.01, 1.0 / rate))
        except asyncio.CancelledError:
            if not task.ended:
                self.emit.status(task, states.CANCELED, states.TASK_CANCELED)

    def cancel(self, task: Task) -> None:
        if not task.started:
            self.emit.status(task, states.CANCELED, states.TASK_CANCELED_BEFORE_START)
        elif task.runner is not None:
            task.runner.cancel()

    async def stop_session(self) -> None:
        """StopSession: queued tasks end REJECTED, running ones are canceled, the door closes."""
        self.closed = True
        while self._queue:
            task, _ = self._queue.popleft()
            if not task.ended:
                self.emit.status(task, states.REJECTED, states.REJECTED_SESSION_STOPPED)
        runners = [t.runner for t in self.registry.live() if t.runner is not None]
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
