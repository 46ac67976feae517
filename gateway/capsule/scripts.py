"""The embedded capsule's scenarios: what each `/scenario NAME k=v ...` task writes.

A new task's first text chooses its scenario (docs/scenarios.md); anything not starting with
``/scenario `` runs the default script. Each script writes its events in the spec's "Event
order within a task" through `Attempt`, which holds the rules every scenario shares (final
text frames, the transport's artifact frames).
"""

from __future__ import annotations

import asyncio
import shlex
import struct
import zlib
from typing import Awaitable, Callable

from gateway.capsule.attempt import STEP, Attempt
from gateway.protocol import events, states

INPUT_TIMEOUT = 0.5  # the `timeout` scenario's request-input wait
NOT_ALLOWED_TOOL = "no-such-tool"
# A burst writes BURST_CHUNK frames back to back, then yields for BURST_PAUSE: far faster
# than a stalled reader drains (so it lags), slow enough that a reading one keeps up.
BURST_CHUNK = 50
BURST_PAUSE = 0.001


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
    reply = await a.wait_for_input(options.get("prompt", "Which file?"))
    await a.tool_result(call_id, "request-input", reply or "", exit_code=None)
    await a.answer_turn(reply)


async def timeout_script(a: Attempt, options: dict) -> None:
    """The wait times out, the call fails, and the task works on while its hooks run
    (`hooks=SECONDS`, default 0) before it ends FAILED `input-timeout`."""
    await a.turn()
    call_id = await a.tool_call("request-input", 32)
    await a.wait_for_input(options.get("prompt", "Which file?"), INPUT_TIMEOUT)
    await a.tool_result(call_id, "request-input", "request-input timed out", exit_code=None,
                        is_error=True)
    await asyncio.sleep(_float(options, "hooks", 0.0))
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
    limit = a.config.lifecycle.max_task_reopens
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
    a.start_turn()
    for i in range(n):
        a.chunk(f"burst {i + 1} ")
        if i % BURST_CHUNK == BURST_CHUNK - 1:
            await asyncio.sleep(BURST_PAUSE)
    await a.end_of_text()
    a.complete(f"burst of {n} frames")


async def image_script(a: Attempt, options: dict) -> None:
    await a.turn()
    call_id = await a.tool_call("screenshot", 18)
    await a.tool_result(call_id, "screenshot", "saved shot.png", exit_code=None,
                        images=[("image/png", SCREENSHOT)])
    await a.answer_turn("Took a screenshot.")


async def tools_script(a: Attempt, options: dict) -> None:
    n = _int(options, "n", 3, 1, 1000)
    await a.turn()
    calls = []
    for i in range(n):
        tool = NOT_ALLOWED_TOOL if i == n - 1 else "bash"
        calls.append((await a.tool_call(tool, 16 + i), tool))
    for i, (call_id, tool) in enumerate(calls):
        if tool == NOT_ALLOWED_TOOL:  # never reached a tool: unfenced, on either transport
            await a.artifact(call_id, tool, f"tool '{tool}' is not declared in manifest allowlist",
                             None, exit_code=None, is_error=True, duration_ms=0)
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
    a.complete("Quiet work finished.")  # streamed nothing: the whole reply as one final frame


SCENARIOS: dict[str, Scenario] = {
    "default": default_script, "input": input_script, "fail": fail_script,
    "slow": slow_script, "reopen": reopen_script, "burst": burst_script,
    "image": image_script, "tools": tools_script, "maxturns": maxturns_script,
    "timeout": timeout_script, "quiet": quiet_script,
}
