"""The `mur watch` printer over recorded event sequences: no network, exact output."""

import pytest
import orjson

from gateway.protocol import events
from gateway.protocol.parser import SSEEvent
from gateway.protocol.states import COMPLETED, FAILED, INPUT_REQUIRED, REJECTED, WORKING
from gateway.watch.printer import STDERR, STDOUT, WatchPrinter

pytestmark = pytest.mark.unit

TASK_A, CTX_A = "tsk_01a22f6551aa7724a7ffaa2d37619591", "ctx_01a22f6551aa7724a7ffaa2d37619592"
TASK_B, CTX_B = "tsk_01a22f6551aa7724a7ffaa2d376195a1", "ctx_01a22f6551aa7724a7ffaa2d376195a2"
TS = "2026-10-13T09:00:00.123Z"
HEARTBEAT = SSEEvent(None, None, ("heartbeat",))


def event(result: dict, event_id: int | None = None) -> SSEEvent:
    return SSEEvent(event_id, orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).decode(), ())


def status(state: str, text: str | None = None, task=TASK_A, ctx=CTX_A, event_id=None) -> SSEEvent:
    status = events.task_status(state, TS, text, task_id=task, context_id=ctx)
    return event(events.status_update(task, ctx, status), event_id)


def text(chunk: str, task=TASK_A, ctx=CTX_A, final=False) -> SSEEvent:
    return event(events.task_frame_event(task, ctx, events.text_frame(chunk, final)))


def frame(task_frame: dict, task=TASK_A, ctx=CTX_A) -> SSEEvent:
    return event(events.task_frame_event(task, ctx, task_frame))


def connection(connection_frame: dict) -> SSEEvent:
    return event(events.taskless_frame_event(connection_frame))


def response(answer: str, task=TASK_A, ctx=CTX_A) -> SSEEvent:
    return event(events.artifact_update(task, ctx, events.response_artifact(answer)))


def bash_artifact(content="hello", exit_code=0, is_error=False, tool="bash") -> dict:
    return events.artifact_frame(tool_name=tool, content=content, fence_source=None, tool_call_id="toolu_01",
                                 is_error=is_error, duration_ms=1, exit_code=exit_code, truncated=False, attachments=[])


def run(*sequence: SSEEvent, printer: WatchPrinter | None = None) -> tuple[str, str, WatchPrinter]:
    printer = printer or WatchPrinter()
    out = {STDOUT: "", STDERR: ""}
    for item in sequence:
        for write in printer.feed(item):
            out[write.stream] += write.text
    return out[STDOUT], out[STDERR], printer


STATELESS_ACK = connection(events.connection_ack_frame("stateless"))
THREADED_ACK = connection(events.connection_ack_frame("threaded"))


def test_a_default_task_prints_statuses_text_artifact_and_the_response_under_completed():
    stdout, stderr, printer = run(
        STATELESS_ACK,
        status(WORKING, "inference turn 1", event_id=1),
        frame(events.thinking_frame("hidden reasoning")),
        text("Let me look "), text("at that."),
        frame(events.tool_call_started_frame("toolu_01", "bash")),
        frame(events.tool_call_progress_frame("toolu_01", 24)),
        text("", final=True),
        frame(bash_artifact("<fence>\nhello\n\n</fence>")),
        status(WORKING, "inference turn 2"),
        text("Done: "), text("hello"), text("", final=True),
        response("Done: hello\nsecond line"),
        status(COMPLETED, "task completed", event_id=14),
    )
    assert stdout == (
        "tsk:619591 [working] inference turn 1\n"
        "Let me look at that.\n"
        "tsk:619591 [artifact] bash exit 0\n"
        "  <fence>\n  hello\n\n  </fence>\n"
        "tsk:619591 [working] inference turn 2\n"
        "Done: hello\n"
        "tsk:619591 [completed]\n"
        "  Done: hello\n  second line\n"
    )
    assert stderr == ""
    assert printer.last_event_id == 14 and printer.exit_code is None


def test_a_terminal_status_prints_its_state_alone_and_drops_a_held_response():
    stdout, _, _ = run(status(FAILED, "task failed (driver_error): simulated driver failure"),
                       status(REJECTED, "task rejected: the session ended before this task started", task=TASK_B))
    assert stdout == "tsk:619591 [failed]\ntsk:6195a1 [rejected]\n"


def test_input_required_prints_the_prompt():
    stdout, _, _ = run(status(INPUT_REQUIRED, "Which file?"))
    assert stdout == "tsk:619591 [input-required] Which file?\n"


def test_a_completed_task_without_a_response_prints_no_indented_block():
    assert run(status(COMPLETED, "task completed"))[0] == "tsk:619591 [completed]\n"


def test_artifact_lines_name_errors_and_exit_codes():
    stdout, _, _ = run(frame(bash_artifact("refused", exit_code=None, is_error=True, tool="no-such-tool")),
                       frame(bash_artifact("", exit_code=3)))
    assert stdout == "tsk:619591 [artifact] no-such-tool error\n  refused\ntsk:619591 [artifact] bash exit 3\n"


def test_text_that_did_not_end_its_line_is_ended_before_the_next_status():
    stdout, _, _ = run(status(WORKING, "inference turn 1"), text("partial"), status(WORKING, "inference turn 2"),
                       text("whole line\n"), status(WORKING, "inference turn 3"))
    assert stdout == ("tsk:619591 [working] inference turn 1\npartial\ntsk:619591 [working] inference turn 2\n"
                      "whole line\ntsk:619591 [working] inference turn 3\n")


def test_interleaved_tasks_are_labelled_by_task_in_stateless_mode():
    stdout, _, _ = run(STATELESS_ACK,
                       status(WORKING, "inference turn 1"), status(WORKING, "inference turn 1", task=TASK_B, ctx=CTX_B),
                       text("a1 ", ), text("b1 ", task=TASK_B, ctx=CTX_B), text("a2"),
                       status(COMPLETED, task=TASK_B, ctx=CTX_B))
    assert stdout == ("tsk:619591 [working] inference turn 1\n"
                      "tsk:6195a1 [working] inference turn 1\n"
                      "tsk:619591 a1 \n"
                      "tsk:6195a1 b1 \n"
                      "tsk:619591 a2\n"
                      "tsk:6195a1 [completed]\n")


def test_threaded_mode_labels_by_context_so_a_conversation_shares_one_label():
    stdout, _, _ = run(THREADED_ACK, status(WORKING, "inference turn 1"), status(COMPLETED),
                       status(WORKING, "inference turn 1", task=TASK_B), text("same thread"),
                       status(WORKING, "inference turn 1", task=TASK_B, ctx=CTX_B))
    assert stdout == ("ctx:619592 [working] inference turn 1\nctx:619592 [completed]\n"
                      "ctx:619592 [working] inference turn 1\nsame thread\n"
                      "ctx:6195a2 [working] inference turn 1\n")


def test_hidden_events_heartbeats_and_the_opening_task_print_nothing():
    task = events.task(TASK_A, CTX_A, events.task_status("TASK_STATE_SUBMITTED", TS, task_id=TASK_A, context_id=CTX_A))
    stdout, stderr, _ = run(
        HEARTBEAT, event(events.task_event(task)), frame(events.thinking_frame("x")),
        frame(events.tool_call_started_frame("toolu_01", "bash")),
        frame(events.tool_call_progress_frame("toolu_01", 9)),
        frame(events.quota_frame([events.quota_window("five-hour", used=0.4)])),
        frame(events.suggested_prompt_frame("Run the tests")), text("", final=True), STATELESS_ACK)
    assert (stdout, stderr) == ("", "")


def test_unknown_members_frames_keys_and_non_json_are_ignored():
    unknown_key_status = events.status_update(TASK_A, CTX_A, {**events.task_status(
        WORKING, TS, "inference turn 1", task_id=TASK_A, context_id=CTX_A), "novel": {"deep": 1}})
    unknown_key_status["statusUpdate"]["futureKey"] = [1, 2]
    stdout, stderr, printer = run(
        event({"futureMember": {"taskId": TASK_A}}, event_id=5),
        frame({"frame": "future-frame", "text": "not shown"}),
        connection({"frame": "future-connection-frame"}),
        SSEEvent(6, "not json", ()),
        SSEEvent(None, "[1, 2]", ()),
        event({}),
        event(unknown_key_status, event_id=7),
        frame({**events.text_frame("shown", False), "futureKey": True}),
    )
    assert stdout == "tsk:619591 [working] inference turn 1\nshown"
    assert stderr == ""
    assert printer.last_event_id == 7


def test_gap_and_lagged_are_one_warning_each_on_stderr():
    stdout, stderr, _ = run(text("open"), connection(events.gap_frame(37)), connection(events.lagged_frame(40)))
    assert stdout == "tsk:619591 open\n"  # text with no status line before it says whose it is
    assert stderr == ("[murmur] warning: replay gap: earlier events are gone; the oldest buffered event is id 37\n"
                      "[murmur] warning: lagged: this watcher fell behind and missed 40 events\n")


def test_capsule_closed_ends_with_exit_zero():
    _, stderr, printer = run(STATELESS_ACK, connection(events.capsule_closed_frame()))
    assert stderr == "[murmur] capsule closed\n"
    assert printer.exit_code == 0


def test_a_json_rpc_error_event_is_one_line_and_exit_two():
    error = SSEEvent(None, '{"jsonrpc":"2.0","id":1,"error":{"code":-32009,"message":"unsupported version"}}', ())
    _, stderr, printer = run(error)
    assert stderr == "mur watch: the stream answered error -32009: unsupported version\n"
    assert printer.exit_code == 2


def test_a_lost_connection_names_the_last_event_id_or_none():
    address = "http://127.0.0.1:52222"
    hint = "the capsule may still be running; run mur watch again to reattach\n"
    printer = WatchPrinter()
    assert printer.lost(address)[0].text == f"E-IO-003: connection to {address} lost before any event\n{hint}"
    _, _, printer = run(STATELESS_ACK, status(WORKING, "inference turn 1", event_id=3), text("open", ), HEARTBEAT)
    writes = printer.lost(address)
    assert [(w.stream, w.text) for w in writes] == [
        (STDOUT, "\n"), (STDERR, f"E-IO-003: connection to {address} lost after event id 3\n{hint}")]
