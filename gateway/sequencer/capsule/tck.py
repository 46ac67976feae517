"""The A2A TCK's scripted behaviours, so the official A2A TCK 1.0 can exercise the gateway.

A message whose ``messageId`` starts with ``tck-`` runs the script its prefix names in the
TCK's ``scenarios/*.feature`` (branch ``1.0-dev``); an unknown ``tck-`` prefix completes
with ``Unhandled messageId prefix: <messageId>``, as the TCK's reference agent does. A
reply to a ``tck-`` task that waits for input runs the script *its* messageId names, so the
TCK's multi-turn tests (``tck-input-required`` again, then ``tck-complete-task``) work.

Every script is written as a capsule would write it (spec "Event order within a task"): a
turn's WORKING status, the reply as text frames, then the response artifact and COMPLETED.
Where the TCK's agent would do something the spec has no event for, the spec's form is
used instead:

- an artifact is the task's one ``response`` artifact, written just before COMPLETED; the
  file, file-url and data scripts put their one part in it in place of a text part;
- a chunked artifact (``tck-stream-artifact-chunked``) is streamed as text frames, and the
  whole text is the response;
- input is asked for with a ``request-input`` tool call, as the ``input`` scenario does;
- ``tck-reject-task`` (the TCK's agent raises an error) fails with ``error[rejected]: rejected``;
- ``tck-message-response``: the TCK's agent answers a Message and keeps no task, so a
  SendMessage of it is answered with ``message_response`` (no task is created); streamed, it
  completes a task whose response is that text, since a stream always carries a task.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Awaitable, Callable

from gateway.sequencer.capsule.messages import UserMessage
from gateway.protocol import events, ids, states

if TYPE_CHECKING:
    from gateway.sequencer.capsule.attempt import Attempt

PREFIX = "tck-"
INPUT_PROMPT = "The TCK asks for input"
FILE_NAME = "output.txt"
FILE_BYTES = b"tck"
FILE_URL = "https://example.com/output.txt"
DATA = {"key": "value", "count": 42}

# A script plays one message of a tck- task; it returns the reply to play next when it
# asked for input, or None once the task has ended.
Script = Callable[["Attempt", UserMessage], Awaitable["UserMessage | None"]]


MESSAGE_RESPONSE_PREFIX = "tck-message-response"
MESSAGE_RESPONSE_TEXT = "Direct message response"


def is_tck(message: UserMessage) -> bool:
    return message.message_id.startswith(PREFIX)


def message_response(message: UserMessage) -> dict | None:
    """The Message a SendMessage of `tck-message-response` is answered with, else None."""
    if message.task_id is not None or not message.message_id.startswith(MESSAGE_RESPONSE_PREFIX):
        return None
    return events.agent_message(MESSAGE_RESPONSE_TEXT, context_id=message.context_id or ids.new_context_id())


def _artifact(part: dict) -> dict:
    return {"artifactId": ids.new_artifact_id(), "name": events.RESPONSE_ARTIFACT_NAME, "parts": [part]}


def answer(*chunks: str) -> Script:
    """Stream `chunks` as text frames, then complete with their whole text as the response."""

    async def script(a: Attempt, message: UserMessage) -> None:
        text = await a.text(*chunks)
        await a.end_of_text()
        a.complete(text)

    return script


def artifact(part: dict) -> Script:
    """Complete with a response artifact holding the one (non-text) `part`."""

    async def script(a: Attempt, message: UserMessage) -> None:
        a.complete_with(_artifact(part))

    return script


async def complete_empty(a: Attempt, message: UserMessage) -> None:
    a.complete("")


async def input_required(a: Attempt, message: UserMessage) -> UserMessage:
    call_id = await a.tool_call("request-input", len(INPUT_PROMPT))
    reply = await a.wait_for_reply(INPUT_PROMPT)
    assert reply is not None  # no timeout: the wait ends only with a reply
    await a.tool_result(call_id, "request-input", reply.text, exit_code=None)
    return reply


async def reject(a: Attempt, message: UserMessage) -> None:
    a.fail(states.runtime_error("rejected", "rejected"))


async def unhandled(a: Attempt, message: UserMessage) -> None:
    await answer(f"Unhandled messageId prefix: {message.message_id}")(a, message)


FILE_PART = {"raw": base64.b64encode(FILE_BYTES).decode(), "filename": FILE_NAME,
             "mediaType": events.TEXT_PLAIN}
FILE_URL_PART = {"url": FILE_URL, "filename": FILE_NAME, "mediaType": events.TEXT_PLAIN}

SCRIPTS: dict[str, Script] = {
    "tck-complete-task": answer("Hello from TCK"),
    "tck-artifact-text": answer("Generated text content"),
    "tck-artifact-file": artifact(FILE_PART),
    "tck-artifact-file-url": artifact(FILE_URL_PART),
    "tck-artifact-data": artifact({"data": DATA}),
    MESSAGE_RESPONSE_PREFIX: answer(MESSAGE_RESPONSE_TEXT),
    "tck-input-required": input_required,
    "tck-reject-task": reject,
    "tck-stream-001": answer("Stream hello from TCK"),
    "tck-stream-002": complete_empty,
    "tck-stream-003": answer("Stream task lifecycle"),
    "tck-stream-ordering-001": answer("Ordered output"),
    "tck-stream-artifact-text": answer("Streamed text content"),
    "tck-stream-artifact-file": artifact(FILE_PART),
    "tck-stream-artifact-chunked": answer("chunk-1 ", "chunk-2"),
}
# Longest first, so `tck-artifact-file-url-…` is not taken for `tck-artifact-file`.
_BY_LENGTH = sorted(SCRIPTS, key=len, reverse=True)


def script_for(message_id: str) -> Script:
    prefix = next((p for p in _BY_LENGTH if message_id.startswith(p)), None)
    return SCRIPTS[prefix] if prefix is not None else unhandled


async def tck_script(a: Attempt, options: dict) -> None:
    """A tck- task: its first message's script, then each reply's, one turn each."""
    message: UserMessage | None = a.message
    while message is not None:
        await a.turn()
        message = await script_for(message.message_id)(a, message)
