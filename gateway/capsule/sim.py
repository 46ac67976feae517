"""The embedded capsule's scenarios: they write what a real capsule would, for demos and tests.

A new task's first text chooses its scenario (docs/scenarios.md); anything not starting with
``/scenario `` runs the default script, and a ``messageId`` starting ``tck-`` runs the A2A
TCK's scripts instead (`tck.py`). Every
scenario writes its events in the spec's "Event order within a task" and ends in exactly one
terminal status, recorded in the registry before it is written. Turns are numbered across
every attempt of a task.

Tasks run concurrently up to ``lifecycle.max_running_tasks`` (a setting of ours; the spec
leaves a capsule's concurrency to it); beyond that they wait in a FIFO queue, and a
queued task that is canceled ends ``task canceled before it started``. Live tasks beyond
``lifecycle.max_queued_tasks`` are rejected at the door.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import shlex
import struct
import time
import zlib
from typing import Awaitable, Callable

from gateway.capsule import tck
from gateway.capsule.messages import UserMessage
from gateway.capsule.tasks import Registry, Task
from gateway.capsule.writer import Emitter
from gateway.config import Config
from gateway.protocol import events, ids, states

STEP = 0.002  # seconds between the default script's events: fast, yet visibly a stream
INPUT_TIMEOUT = 0.5  # the `timeout` scenario's request-input wait
NOT_ALLOWED_TOOL = "no-such-tool"
# A burst writes BURST_CHUNK frames back to back, then yields for BURST_PAUSE: far faster
# than a stalled reader drains (so it lags), slow enough that a reading one keeps up.
BURST_CHUNK = 50
BURST_PAUSE = 0.001


class Refusal(Exception):
    """The door refuses a new task: the one REJECTED task the caller is answered with."""

    def __init__(self, task: dict):
        super().__init__(task["status"]["message"]["parts"][0]["text"])
        self.task = task


class MaxTurns(Exception):
    pass


def _png(width: int = 8, height: int = 8) -> bytes:
    """A small valid PNG (a gradient), built here so no binary file ships."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 32, y * 32, 128)) for x in range(width)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


SCREENSHOT = _png()


def parse_scenario(text: str) -> tuple[str, dict[str, str]]:
    """('default', {}) or (name, {key: value}) from `/scenario NAME k=v ...`."""
    if not text.startswith("/scenario "):
        return "default", {}
    try:
        words = shlex.split(text[len("/scenario "):])
    except ValueError:
        words = text[len("/scenario "):].split()
    if not words:
        return "default", {}
    options = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    return words[0], options


def _int(options: dict, key: str, default: int, low: int = 0, high: int = 100_000) -> int:
    try:
        return max(low, min(high, int(options.get(key, default))))
    except ValueError:
        return default


def _float(options: dict, key: str, default: float, high: float = 3600.0) -> float:
    try:
        value = float(options.get(key, default))
    except ValueError:
        return default
    return max(0.0, min(high, value)) if value == value else default


def fenced(tool: str, body: str) -> str:
    return f"<untrusted-content source=tool:{tool}>\n{body}\n</untrusted-content>"


class Attempt:
    """One task's run: the helpers every scenario writes its events with."""

    def __init__(self, capsule: "ScenarioRunner", task: Task, message: UserMessage):
        self.capsule, self.task, self.message = capsule, task, message
        self.emit = capsule.emit
        self.turns = 0
        self.calls = 0
        self.transport = capsule.config.inference.transport

    async def turn(self) -> None:
        self.turns += 1
        if self.turns > self.capsule.config.inference.max_turns:
            raise MaxTurns
        self.emit.status(self.task, states.WORKING, states.inference_turn(self.turns))
        await asyncio.sleep(STEP)

    async def frame(self, frame: dict) -> None:
        self.emit.frame(self.task, frame)
        await asyncio.sleep(STEP)

    async def text(self, *chunks: str) -> str:
        for chunk in chunks:
            await self.frame(events.text_frame(chunk, False))
        return "".join(chunks)

    async def end_of_text(self) -> None:
        """The turn's `"final":true` empty text frame: the driver returned."""
        await self.frame(events.text_frame("", True))

    async def answer_turn(self, *chunks: str) -> None:
        """A last turn that streams its answer, then completes the task with it."""
        await self.turn()
        answer = await self.text(*chunks)
        await self.end_of_text()
        self.complete(answer)

    def call_id(self) -> str:
        self.calls += 1
        return f"toolu_{self.calls:02d}"

    async def tool_call(self, tool: str, input_bytes: int) -> str:
        call_id = self.call_id()
        await self.frame(events.tool_call_started_frame(call_id, tool))
        await self.frame(events.tool_call_progress_frame(call_id, input_bytes))
        return call_id

    async def tool_result(self, call_id: str | None, tool: str, content: str, *, exit_code=0,
                          is_error=False, fence=True, attachments=()) -> None:
        await self.frame(events.artifact_frame(
            tool_name=tool, content=fenced(tool, content) if fence else content,
            fence_source=f"tool:{tool}" if fence else None, tool_call_id=call_id,
            is_error=is_error, duration_ms=0 if not fence else 12, exit_code=exit_code,
            truncated=False, attachments=list(attachments)))

    async def process_reports(self) -> None:
        """A transport: process harness reports its windows and a next-prompt guess."""
        if self.transport == "process":
            await self.frame(events.quota_frame([events.quota_window(
                "five-hour", used=0.42, resets_at_ms=int(time.time() * 1000) + 3_600_000,
                window_minutes=300, state="ok")]))
            await self.frame(events.suggested_prompt_frame("Run the test suite"))

    def complete(self, answer: str) -> None:
        self.complete_with(events.response_artifact(answer) if answer else None)

    def complete_with(self, artifact: dict | None) -> None:
        """COMPLETED, after `artifact` (the task's response artifact) when there is one."""
        if artifact is not None:
            self.task.artifacts = [artifact]
            self.emit.response(self.task, artifact)
        self.emit.status(self.task, states.COMPLETED, states.TASK_COMPLETED)

    def fail(self, text: str) -> None:
        self.emit.status(self.task, states.FAILED, text)

    async def wait_for_reply(self, prompt: str, timeout: float | None = None) -> UserMessage | None:
        """INPUT_REQUIRED with the prompt; the reply, or None when the wait timed out."""
        self.task.reply = asyncio.get_running_loop().create_future()
        self.emit.status(self.task, states.INPUT_REQUIRED, prompt)
        try:
            reply = await asyncio.wait_for(asyncio.shield(self.task.reply), timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self.task.reply = None
        return reply  # the sequencer wrote `resumed` when it took the reply

    async def wait_for_input(self, prompt: str, timeout: float | None = None) -> str | None:
        """The reply's text, or None when the wait timed out."""
        reply = await self.wait_for_reply(prompt, timeout)
        return None if reply is None else reply.text


Scenario = Callable[[Attempt, dict], Awaitable[None]]


async def default_script(a: Attempt, options: dict) -> None:
    await a.turn()
    await a.frame(events.thinking_frame("The request names one file; read it first"))
    await a.text("Let me look ", "at that.")
    call_id = await a.tool_call("bash", 24)
    await a.end_of_text()
    await a.tool_result(call_id, "bash", "Exit code: 0\nStdout:\nhello\n")
    await a.turn()
    answer = await a.text("Done: ", a.message.text[:200] or "nothing asked")
    await a.end_of_text()
    await a.process_reports()
    a.complete(answer)


async def input_script(a: Attempt, options: dict) -> None:
    await a.turn()
    call_id = await a.tool_call("request-input", 32)
    await a.end_of_text()
    reply = await a.wait_for_input(options.get("prompt", "Which file?"))
    await a.tool_result(call_id, "request-input", reply or "", exit_code=None)
    await a.turn()
    await a.text(reply)
    await a.end_of_text()
    a.complete(reply)


async def timeout_script(a: Attempt, options: dict) -> None:
    await a.turn()
    call_id = await a.tool_call("request-input", 32)
    await a.end_of_text()
    await a.wait_for_input(options.get("prompt", "Which file?"), INPUT_TIMEOUT)
    await a.tool_result(call_id, "request-input", "request-input timed out", exit_code=None,
                        is_error=True)
    a.fail(states.INPUT_TIMEOUT)


async def fail_script(a: Attempt, options: dict) -> None:
    await a.turn()
    await a.text("Starting")
    await a.end_of_text()
    a.fail(states.task_failed("driver_error", "simulated driver failure"))


async def slow_script(a: Attempt, options: dict) -> None:
    turns, delay = _int(options, "turns", 5, 1, 1000), _float(options, "delay", 1.0)
    answer = ""
    for n in range(turns):
        await a.turn()
        await asyncio.sleep(delay)
        answer = await a.text(f"turn {n + 1} done")
        await a.end_of_text()
    a.complete(answer)


async def reopen_script(a: Attempt, options: dict) -> None:
    hook = options.get("hook", "review-gate")
    limit = a.capsule.config.lifecycle.max_task_reopens
    await a.turn()
    await a.text("First draft")
    await a.end_of_text()
    if limit < 1:
        a.fail(f"task not reopened: hook {hook} asked for reopen 1 but "
               f"lifecycle.max_task_reopens is {limit}")
        return
    a.emit.status(a.task, states.WORKING, states.reopened_by_hook(hook), reopen=1)
    await asyncio.sleep(STEP)
    await a.answer_turn("Reviewed answer")


async def burst_script(a: Attempt, options: dict) -> None:
    n = _int(options, "n", 1000, 0, 1_000_000)
    a.turns += 1
    a.emit.status(a.task, states.WORKING, states.inference_turn(a.turns))
    for i in range(n):
        a.emit.frame(a.task, events.text_frame(f"burst {i + 1} ", False))
        if i % BURST_CHUNK == BURST_CHUNK - 1:
            await asyncio.sleep(BURST_PAUSE)
    a.emit.frame(a.task, events.text_frame("", True))
    a.complete(f"burst of {n} frames")


async def image_script(a: Attempt, options: dict) -> None:
    await a.turn()
    call_id = await a.tool_call("screenshot", 18)
    sha = hashlib.sha256(SCREENSHOT).hexdigest()
    a.task.attachments[sha] = ("image/png", SCREENSHOT)
    attachment = events.attachment("image/png", len(SCREENSHOT), sha,
                                   f"/attachments/{a.task.id}/{sha}")
    await a.tool_result(call_id, "screenshot", "saved shot.png", exit_code=None,
                        attachments=[attachment])
    await a.answer_turn("Took a screenshot.")


async def tools_script(a: Attempt, options: dict) -> None:
    n = _int(options, "n", 3, 1, 1000)
    await a.turn()
    calls = []
    for i in range(n):
        tool = NOT_ALLOWED_TOOL if i == n - 1 else "bash"
        calls.append((await a.tool_call(tool, 16 + i), tool))
    for i, (call_id, tool) in enumerate(calls):
        if tool == NOT_ALLOWED_TOOL:
            await a.frame(events.artifact_frame(
                tool_name=tool, content=f"tool '{tool}' is not declared in manifest allowlist",
                fence_source=None, tool_call_id=call_id, is_error=True, duration_ms=0,
                exit_code=None, truncated=False, attachments=[]))
        else:
            await a.tool_result(call_id, tool, f"Exit code: 0\nStdout:\ncall {i + 1}\n")
    await a.answer_turn(f"Ran {n} tool calls.")


async def maxturns_script(a: Attempt, options: dict) -> None:
    while True:  # ends when a.turn() raises MaxTurns
        await a.turn()
        call_id = await a.tool_call("bash", 8)
        await a.tool_result(call_id, "bash", "Exit code: 0\nStdout:\nagain\n")


async def quiet_script(a: Attempt, options: dict) -> None:
    await a.turn()
    await asyncio.sleep(_float(options, "seconds", 5.0))
    answer = "Quiet work finished."
    await a.frame(events.text_frame(answer, True))
    a.complete(answer)


SCENARIOS: dict[str, Scenario] = {
    "default": default_script, "input": input_script, "fail": fail_script,
    "slow": slow_script, "reopen": reopen_script, "burst": burst_script,
    "image": image_script, "tools": tools_script, "maxturns": maxturns_script,
    "timeout": timeout_script, "quiet": quiet_script,
}


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
        name, options = parse_scenario(message.text)
        scenario = tck.tck_script if tck.is_tck(message) else SCENARIOS.get(name, default_script)
        attempt = Attempt(self, task, message)
        try:
            await scenario(attempt, options)
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
