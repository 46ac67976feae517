"""One run of a task on the embedded capsule: the helpers every scenario writes its events with.

The spec's rules that hold for every scenario live here, so no script can break them:

- a turn's ``"final":true`` empty text frame is written only when the turn streamed text,
  and a completed attempt whose last turn streamed none writes its whole reply as one
  ``"final":true`` text frame (spec "Event order within a task", steps 3 and 6);
- a tool call's artifact frame is the one the capsule's ``inference.transport`` writes
  (spec "Transports"): on ``process`` the harness reports it, so ``exitCode`` is null,
  ``truncated`` false, ``attachments`` empty, each image is a placeholder in ``content``
  and nothing is stored;
- a ``request-input`` wait ends in the task working again: answered (the embedded capsule
  writes ``resumed``) or timed out. A timed-out wait writes no status (the spec's working
  messages name none for it); the task's state is WORKING again in the registry, so the
  carriers of its next frames repeat WORKING and a late reply is refused like any
  message naming a working task (-32004).

https://docs.murmur.nexus/reference/streaming-protocol/
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Sequence

from gateway.sequencer.capsule.messages import UserMessage
from gateway.sequencer.capsule.tasks import Task
from gateway.sequencer.capsule.interfaces import Emitter
from gateway.config.options import Config
from gateway.protocol import events, states

STEP = 0.002  # seconds between a script's events: fast, yet visibly a stream


class MaxTurns(Exception):
    pass


def fenced(tool: str, body: str) -> str:
    return f"<untrusted-content source=tool:{tool}>\n{body}\n</untrusted-content>"


def image_placeholder(media_type: str, data: bytes) -> str:
    """What a process harness reports in place of an image (spec "Transports")."""
    return f"[image: {media_type}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}]"


class Attempt:
    """One task's run; `streamed` says whether the current turn has streamed text."""

    def __init__(self, config: Config, emit: Emitter, task: Task, message: UserMessage):
        self.config, self.emit, self.task, self.message = config, emit, task, message
        self.turns = 0
        self.calls = 0
        self.streamed = False
        self.transport = config.inference.transport

    def start_turn(self) -> None:
        """The turn's WORKING status, without the pause `turn` takes (for bursts)."""
        self.turns += 1
        if self.turns > self.config.inference.max_turns:
            raise MaxTurns
        self.streamed = False
        self.emit.status(self.task, states.WORKING, states.inference_turn(self.turns))

    async def turn(self) -> None:
        self.start_turn()
        await asyncio.sleep(STEP)

    async def frame(self, frame: dict) -> None:
        self.emit.frame(self.task, frame)
        await asyncio.sleep(STEP)

    def chunk(self, text: str) -> None:
        """One streamed `"final":false` text frame (an empty chunk is not written)."""
        if text:
            self.streamed = True
            self.emit.frame(self.task, events.text_frame(text, False))

    async def text(self, *chunks: str) -> str:
        for chunk in chunks:
            self.chunk(chunk)
            await asyncio.sleep(STEP)
        return "".join(chunks)

    async def end_of_text(self) -> None:
        """The driver returned: the `"final":true` empty text frame, when the turn streamed text."""
        if self.streamed:
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

    async def tool_result(self, call_id: str | None, tool: str, body: str, *, exit_code: int | None = 0,
                          is_error: bool = False, images: Sequence[tuple[str, bytes]] = ()) -> None:
        """A tool's fenced result, as the capsule's transport reports it."""
        await self.artifact(call_id, tool, fenced(tool, body), f"tool:{tool}", exit_code=exit_code,
                            is_error=is_error, duration_ms=12, images=images)

    async def artifact(self, call_id: str | None, tool: str, content: str, fence_source: str | None, *,
                       exit_code: int | None, is_error: bool, duration_ms: int,
                       images: Sequence[tuple[str, bytes]] = ()) -> None:
        """One call's artifact frame. On http each image is stored and listed with its url;
        on process the harness reports the call: images become placeholders in `content`,
        `fenceSource` names a source only while `content` still opens with its fence, and
        there is no exit status, truncation flag or attachment."""
        if self.transport == "process":
            content = "\n".join([content, *(image_placeholder(media, data) for media, data in images)])
            if fence_source is not None and not content.startswith(f"<untrusted-content source={fence_source}>"):
                fence_source = None
            exit_code, attachments = None, []
        else:
            attachments = [self._store(media, data) for media, data in images]
        await self.frame(events.artifact_frame(
            tool_name=tool, content=content, fence_source=fence_source, tool_call_id=call_id,
            is_error=is_error, duration_ms=duration_ms, exit_code=exit_code, truncated=False,
            attachments=attachments))

    def _store(self, media_type: str, data: bytes) -> dict:
        """Keep an image for GET /attachments/<task>/<sha256>; its entry for the frame."""
        sha = hashlib.sha256(data).hexdigest()
        self.task.attachments[sha] = (media_type, data)
        return events.attachment(media_type, len(data), sha, f"/attachments/{self.task.id}/{sha}")

    async def process_reports(self) -> None:
        """A transport: process harness reports its windows and a next-prompt guess."""
        if self.transport == "process":
            await self.frame(events.quota_frame([events.quota_window(
                "five-hour", used=0.42, resets_at_ms=int(time.time() * 1000) + 3_600_000,
                window_minutes=300, state="ok")]))
            await self.frame(events.suggested_prompt_frame("Run the test suite"))

    def complete(self, answer: str) -> None:
        """COMPLETED with `answer` (its whole text as a final frame when the last turn streamed none)."""
        if answer and not self.streamed:
            self.emit.frame(self.task, events.text_frame(answer, True))
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
        waiter = self.task.reply = asyncio.get_running_loop().create_future()
        self.emit.status(self.task, states.INPUT_REQUIRED, prompt)
        try:  # answered: the embedded capsule wrote `resumed` when it took the reply
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            if waiter.done():  # taken as the wait timed out: it is read, never dropped
                return waiter.result()
            self.task.set_status(states.WORKING)
            return None
        finally:
            self.task.reply = None

    async def wait_for_input(self, prompt: str, timeout: float | None = None) -> str | None:
        """The reply's text, or None when the wait timed out."""
        reply = await self.wait_for_reply(prompt, timeout)
        return None if reply is None else reply.text
