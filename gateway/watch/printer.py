"""What `mur watch` prints for each event of a murmur.WatchSession: events in, writes out.

The printer does no I/O. `WatchPrinter.feed` takes one parsed SSE event and returns the
`Write`s (a stream name and a piece of text) the caller must send and flush; `lost` gives
the lines for a connection that ended without `capsule-closed`. It follows the spec's
table "What `mur watch` implements":

- `statusUpdate`: `<label> [<state>] <message>`, the state in murmur's word; a terminal
  status as `<label> [<state>]` with no message. The label comes first, so each line ends
  in exactly the spec's shape, `[<state>] <message>` or `[<state>]` alone. `[submitted]`
  never appears: the opening `task` is ignored.
- the `response` `artifactUpdate` is held, and printed under its task's `[completed]`
  line, every line indented by two spaces.
- `text` frames are printed as they arrive, unchanged, except that a run of text that
  starts a line for a task other than the one the previous stdout line was about is
  prefixed with `<label> `: one task's text follows its own status line unlabelled,
  interleaved tasks' text says whose it is. `artifact` frames
  print `<label> [artifact] <toolName>`, then ` error` when `isError`, ` exit <n>` when
  `exitCode` is set, then the content indented by two spaces.
- A status, artifact or warning that follows text which did not end its line starts on a
  new line; so does text of a task other than the one whose text left the line open.
- `thinking`, tool-call frames, `quota`, `suggested-prompt`, `task`, heartbeats, unknown
  members, unknown frames and anything that is not a JSON-RPC response are not shown.
- A stream the server ended itself without `capsule-closed` (a gateway ends a watcher's
  stream so when a reload revoked its token, or when it drains) is one line on stderr
  saying what happened (`ended`), not the lost connection's E-IO-003 and its hint.
- `gap` and `lagged` are one warning each on stderr; `capsule-closed` prints
  `[murmur] capsule closed` on stderr and sets `exit_code` to 0. A JSON-RPC error event
  prints one line on stderr and sets `exit_code` to 2, as a refused request does.

The label tells interleaved tasks apart, and is on every status and artifact line, one
task or many, so the output's shape never depends on what else the capsule runs. It is
`tsk:` and the last six hex digits of the task id when the `connection-ack` says
`conversationMode` `stateless` (or says nothing), and `ctx:` and the last six hex digits of
the context id when it says `threaded`: there a conversation's tasks are one thread and
share a label. Ids are UUIDv7s whose tail is random (or a counter within one
millisecond), so six digits tell a session's tasks apart in practice.
"""

from __future__ import annotations

import textwrap
from typing import Callable, NamedTuple

from gateway.protocol import events
from gateway.protocol.parser import SSEEvent, read_stream_response
from gateway.protocol.states import COMPLETED, is_terminal, murmur_word

STDOUT = "stdout"
STDERR = "stderr"
THREADED = "threaded"
LABEL_DIGITS = 6
INDENT = "  "
LOST_HINT = "the capsule may still be running; run mur watch again to reattach"
EXIT_CAPSULE_CLOSED = 0
EXIT_REFUSED = 2


class Write(NamedTuple):
    stream: str  # STDOUT or STDERR
    text: str


def indented(text: str) -> str:
    """`text` with each non-empty line indented, ending with one newline."""
    return textwrap.indent(text.rstrip("\n"), INDENT) + "\n"


class WatchPrinter:
    def __init__(self) -> None:
        self.threaded = False
        self.last_event_id: int | None = None
        self.exit_code: int | None = None  # set when the stream says mur watch is done
        self._responses: dict[str | None, str] = {}  # task id (None: a body naming none) -> its held `response` text
        self._open_text: str | None = None  # the label of the text that left stdout mid-line
        self._stdout_owner: str | None = None  # the label of the last line or text on stdout
        self._frame_handlers: dict[str, Callable[[dict, dict], list[Write]]] = {
            events.FRAME_TEXT: self._text,
            events.FRAME_ARTIFACT: self._artifact,
            events.FRAME_CONNECTION_ACK: self._connection_ack,
            events.FRAME_GAP: self._gap,
            events.FRAME_LAGGED: self._lagged,
            events.FRAME_CAPSULE_CLOSED: self._capsule_closed,
        }

    def feed(self, event: SSEEvent) -> list[Write]:
        if event.id is not None:
            self.last_event_id = event.id
        if event.data is None:
            return []
        try:
            _, item, error = read_stream_response(event.data)
        except ValueError:
            return []
        if error is not None:
            return self._error(error)
        if item is None:
            return []
        if item.frame is not None:
            handler = self._frame_handlers.get(item.frame["frame"])  # parser.py: a frame has the key
            return handler(item.body, item.frame) if handler else []
        if item.kind == "statusUpdate":
            return self._status(item.body)
        if item.kind == "artifactUpdate":
            self._hold_response(item.body)
        return []

    def _where(self) -> str:
        return "before any event" if self.last_event_id is None else f"after event id {self.last_event_id}"

    def lost(self, address: str) -> list[Write]:
        """The E-IO-003 lines for a connection that was lost without `capsule-closed`."""
        return self._warn(f"E-IO-003: connection to {address} lost {self._where()}\n{LOST_HINT}")

    def ended(self, address: str, what: str) -> list[Write]:
        """The line for a stream the server ended itself, without `capsule-closed`: `what`
        happened (a revoked token, a drain), not a lost connection's hint."""
        return self._warn(f"[murmur] {address} ended the stream {self._where()}: {what}")

    # --- standard events ---

    def _status(self, body: dict) -> list[Write]:
        status = body.get("status")
        if not isinstance(status, dict):
            return []
        state = status.get("state", "")  # absent: no murmur word, as a state it does not know
        try:
            word = murmur_word(state)
        except KeyError:
            return []
        label = self._label(body)
        line = f"{label} [{word}]"
        if is_terminal(state):
            response = self._responses.pop(body.get("taskId"), None)
            tail = indented(response) if state == COMPLETED and response else ""
            return self._line(label, f"{line}\n{tail}")
        message = _message_text(status.get("message"))
        return self._line(label, f"{line} {message}\n" if message else f"{line}\n")

    def _hold_response(self, body: dict) -> None:
        artifact = body.get("artifact")
        if isinstance(artifact, dict) and artifact.get("name") == events.RESPONSE_ARTIFACT_NAME:
            self._responses[body.get("taskId")] = _parts_text(artifact.get("parts"))

    # --- frames ---

    def _text(self, body: dict, frame: dict) -> list[Write]:
        text = frame.get("text")
        if not isinstance(text, str) or not text:
            return []
        label = self._label(body)
        writes = self._end_open_line() if self._open_text not in (None, label) else []
        if self._open_text is None and label != self._stdout_owner:
            text = f"{label} {text}"
        self._open_text = None if text.endswith("\n") else label
        self._stdout_owner = label
        return writes + [Write(STDOUT, text)]

    def _artifact(self, body: dict, frame: dict) -> list[Write]:
        label = self._label(body)
        line = f"{label} [artifact] {frame.get('toolName')}"
        if frame.get("isError") is True:
            line += " error"
        if isinstance(frame.get("exitCode"), int):
            line += f" exit {frame['exitCode']}"
        content = frame.get("content")
        return self._line(label, f"{line}\n" + (indented(content) if isinstance(content, str) and content else ""))

    def _connection_ack(self, body: dict, frame: dict) -> list[Write]:
        self.threaded = frame.get("conversationMode") == THREADED
        return []

    def _gap(self, body: dict, frame: dict) -> list[Write]:
        return self._warn(f"[murmur] warning: replay gap: earlier events are gone; "
                          f"the oldest buffered event is id {frame.get('firstAvailableId')}")

    def _lagged(self, body: dict, frame: dict) -> list[Write]:
        return self._warn(f"[murmur] warning: lagged: this watcher fell behind and missed {frame.get('missed')} events")

    def _capsule_closed(self, body: dict, frame: dict) -> list[Write]:
        self.exit_code = EXIT_CAPSULE_CLOSED
        return self._warn("[murmur] capsule closed")

    def _error(self, error: dict) -> list[Write]:
        self.exit_code = EXIT_REFUSED
        detail = f"error {error.get('code')}: {error.get('message')}" if isinstance(error, dict) else str(error)
        return self._warn(f"mur watch: the stream answered {detail}")

    # --- layout ---

    def _label(self, body: dict) -> str:
        prefix, key = ("ctx", "contextId") if self.threaded else ("tsk", "taskId")
        owner = body.get(key)
        return f"{prefix}:{owner[-LABEL_DIGITS:] if isinstance(owner, str) and owner else '?'}"

    def _end_open_line(self) -> list[Write]:
        if self._open_text is None:
            return []
        self._open_text = None
        return [Write(STDOUT, "\n")]

    def _line(self, owner: str, text: str) -> list[Write]:
        writes = self._end_open_line()
        self._stdout_owner = owner
        return writes + [Write(STDOUT, text)]

    def _warn(self, text: str) -> list[Write]:
        return self._end_open_line() + [Write(STDERR, text + "\n")]


def _parts_text(parts: object) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str))


def _message_text(message: object) -> str:
    return _parts_text(message.get("parts")) if isinstance(message, dict) else ""
