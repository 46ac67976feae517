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

from gateway.sequencer.capsule.attempt import STEP, Attempt
from gateway.config.values import Parser, number, whole_number
from gateway.protocol import events, states

INPUT_TIMEOUT = 0.5  # the `timeout` scenario's request-input wait
NOT_ALLOWED_TOOL = "no-such-tool"
# A burst writes BURST_CHUNK frames back to back, then yields for its `pause` (BURST_PAUSE by
# default): far faster than a stalled reader drains (so it lags), slow enough that a reading
# one keeps up. A worker the OS does not run for more than a few pauses falls past the lag
# limit with all its readers, so a test that needs a reader to lose nothing on a busy machine
# asks for a longer pause.
BURST_CHUNK = 50
BURST_MAX_SIZE = 16 * 1024  # a burst frame's text, padded (`size`): big events fill a reader's buffers sooner
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


class ScenarioError(ValueError):
    """A `/scenario` line whose options cannot be run as written; the task fails with it, as
    `task failed (scenario_error): <the message>`."""


SCENARIO_ERROR = "scenario_error"  # the cause of that failure (spec: `task failed (<cause>): …`)


def _text(value: str) -> str:
    if not value:
        raise ValueError("'' is empty; it accepts any text (in quotes when it has spaces)")
    return value


_SECONDS = number("seconds", high=3600.0)
# Each scenario's options: name -> (parser, default). A scenario not listed takes none.
OPTIONS: dict[str, dict[str, tuple[Parser, object]]] = {
    "input": {"prompt": (_text, "Which file?")},
    "timeout": {"prompt": (_text, "Which file?"), "hooks": (_SECONDS, 0.0)},
    "slow": {"turns": (whole_number(1, 1000), 5), "delay": (_SECONDS, 1.0)},
    "reopen": {"hook": (_text, "review-gate")},
    "burst": {"n": (whole_number(0, 1_000_000), 1000), "pause": (_SECONDS, BURST_PAUSE),
              "size": (whole_number(0, BURST_MAX_SIZE), 0)},
    "tools": {"n": (whole_number(1, 1000), 3)},
    "quiet": {"seconds": (_SECONDS, 5.0)},
}


# Options that count a task's turns, which the capsule caps at inference.max_turns
# (attempt.py): a value above the cap is refused at once, naming it (`check_limits`), rather
# than run until the cap ends the task with max_turns exceeded.
TURN_OPTIONS = {"slow": "turns"}


def check_limits(name: str, options: dict, max_turns: int) -> None:
    """Raise ScenarioError when a scenario's options ask for more than the capsule allows."""
    key = TURN_OPTIONS.get(name)
    if key is not None and options[key] > max_turns:
        raise ScenarioError(f"/scenario {name} {key}: {options[key]} is more than inference.max_turns "
                            f"({max_turns}), the capsule's cap on a task's turns")


def parse_scenario(text: str) -> tuple[str, dict]:
    """('default', {}) or (name, {option: value}, every option of the scenario present) from
    `/scenario NAME key=value ...`; a value with spaces is quoted as in a shell
    (`prompt="Which file now?"`). An unknown NAME runs the default script; an option the
    scenario does not take, a word that is not key=value, or a value that does not parse
    raises ScenarioError naming it."""
    if not text.startswith("/scenario "):
        return "default", {}
    try:
        words = shlex.split(text[len("/scenario "):])
    except ValueError as exc:  # shlex: "No closing quotation"
        raise ScenarioError(f"/scenario: {str(exc).lower()}") from None
    if not words or words[0] not in SCENARIOS:
        return "default", {}
    name, takes = words[0], OPTIONS.get(words[0], {})
    options = {key: default for key, (_, default) in takes.items()}
    accepts = f"it takes {', '.join(f'{key}=' for key in takes)}" if takes else "it takes no options"
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise ScenarioError(f"/scenario {name}: {word!r} is not key=value; quote a value that has "
                                f"spaces ({accepts})")
        if key not in takes:
            raise ScenarioError(f"/scenario {name}: {key!r} is not an option of it; {accepts}")
        try:
            options[key] = takes[key][0](value)
        except ValueError as exc:
            raise ScenarioError(f"/scenario {name} {key}: {exc}") from None
    return name, options


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
    reply = await a.wait_for_input(options["prompt"])
    await a.tool_result(call_id, "request-input", reply or "", exit_code=None)
    await a.answer_turn(reply or "")


async def timeout_script(a: Attempt, options: dict) -> None:
    """The wait times out, the call fails, and the task works on while its hooks run
    (`hooks=SECONDS`, default 0) before it ends FAILED `input-timeout`."""
    await a.turn()
    call_id = await a.tool_call("request-input", 32)
    await a.wait_for_input(options["prompt"], INPUT_TIMEOUT)
    await a.tool_result(call_id, "request-input", "request-input timed out", exit_code=None,
                        is_error=True)
    await asyncio.sleep(options["hooks"])
    a.fail(states.INPUT_TIMEOUT)


async def fail_script(a: Attempt, options: dict) -> None:
    await a.turn()
    await a.text("Starting")
    await a.end_of_text()
    a.fail(states.task_failed("driver_error", "simulated driver failure"))


async def slow_script(a: Attempt, options: dict) -> None:
    turns, delay = options["turns"], options["delay"]
    answer = ""
    for n in range(turns):
        await a.turn()
        await asyncio.sleep(delay)
        answer = await a.text(f"turn {n + 1} done")
        await a.end_of_text()
    a.complete(answer)


async def reopen_script(a: Attempt, options: dict) -> None:
    hook = options["hook"]
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
    n, size = options["n"], options["size"]
    a.start_turn()
    for i in range(n):
        a.chunk(f"burst {i + 1} ".ljust(size, "x"))
        if i % BURST_CHUNK == BURST_CHUNK - 1:
            await asyncio.sleep(options["pause"])
    await a.end_of_text()
    a.complete(f"burst of {n} frames")


async def image_script(a: Attempt, options: dict) -> None:
    await a.turn()
    call_id = await a.tool_call("screenshot", 18)
    await a.tool_result(call_id, "screenshot", "saved shot.png", exit_code=None,
                        images=[("image/png", SCREENSHOT)])
    await a.answer_turn("Took a screenshot.")


async def tools_script(a: Attempt, options: dict) -> None:
    n = options["n"]
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
    await asyncio.sleep(options["seconds"])
    a.complete("Quiet work finished.")  # streamed nothing: the whole reply as one final frame


SCENARIOS: dict[str, Scenario] = {
    "default": default_script, "input": input_script, "fail": fail_script,
    "slow": slow_script, "reopen": reopen_script, "burst": burst_script,
    "image": image_script, "tools": tools_script, "maxturns": maxturns_script,
    "timeout": timeout_script, "quiet": quiet_script,
}
