"""Reading SSE streams in the tests: `SSEStream` feeds the bytes to the project's own SSE
parser and, independently, parses every event's result with the A2A SDK's protobuf
`StreamResponse`; what an event is (`item`, `describe`), a task's events, a watch stream, a
full ring and its replay."""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
import struct
import time
from typing import Iterator

import orjson

from gateway.protocol.parser import SSEEvent, SSEParser, read_stream_response
from gateway.protocol.uris import STREAM_URI
from helpers.gateway_harness import front_of, running_gateway, serving_pid
from helpers.http_client import Http, a2a_check, headers_for, rpc, rpc_body, user_message


WATCH = "murmur.WatchSession"


class SSEStream:
    """An open stream: its head, then its events (heartbeats included), each A2A-checked.

    `worker_pid` is the pid of the worker serving it, read from /proc (`serving_pid`). The
    stream request is the connection's first, as a watcher's is: the front of HTTP/1.1
    connections serves it (a stream asked after another request on a kept-alive connection is
    test_front.py's).
    """

    def __init__(self, port: int, method: str, params: dict | None = None, *, rpc_id=1,
                 rcvbuf: int | None = None, timeout: float = 10.0, tls: ssl.SSLContext | None = None,
                 path: str = "/", **header_options):
        self.http = Http(port, rcvbuf=rcvbuf, timeout=timeout, tls=tls)
        self.http.send_request("POST", path, headers_for(**header_options), rpc_body(method, params, rpc_id))
        self.status = self.http.read_head()
        self.headers = self.http.headers
        self.parser = SSEParser()
        self.raw = bytearray()
        self._pending: list[SSEEvent] = []
        self._unchecked: list[str] = []
        self.ended = False

    @functools.cached_property
    def worker_pid(self) -> int | None:
        return serving_pid(self.http.sock)

    def next(self) -> SSEEvent | None:
        """The next SSE block (event or heartbeat); None when the response ended."""
        while not self._pending:
            chunk = self.http.read_chunk()
            if chunk is None:
                self.ended = True
                return None
            self.raw += chunk
            self._pending.extend(self.parser.feed(chunk))
        event = self._pending.pop(0)
        if event.data is not None:
            self._unchecked.append(event.data)
        return event

    def check_a2a(self) -> None:
        """Parse every event read so far with the A2A SDK (deferred so reading stays fast)."""
        for data in self._unchecked:
            a2a_check(data)
        self._unchecked.clear()

    def events(self, *, heartbeats: bool = False) -> Iterator[SSEEvent]:
        while (event := self.next()) is not None:
            if event.data is None and not heartbeats:
                continue
            yield event

    def read_until(self, predicate, *, limit: int = 100_000, within: float = 30.0) -> list[SSEEvent]:
        """Events (no heartbeats) up to and including the first that satisfies predicate.

        Heartbeats keep a socket timeout from firing, so the wait is bounded here instead."""
        seen = []
        deadline = time.monotonic() + within
        for event in self.events(heartbeats=True):
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching event within {within} s; saw {len(seen)}")
            if event.data is None:
                continue
            seen.append(event)
            if predicate(event) or len(seen) >= limit:
                return seen
        return seen

    def close(self) -> None:
        self.http.close()
        self.check_a2a()

    def __enter__(self) -> SSEStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def item(event: SSEEvent):
    """(kind, body, frame) of an event's StreamResponse."""
    _, stream_item, error = read_stream_response(event.data)
    assert error is None, error
    return stream_item


def describe(event: SSEEvent) -> str:
    """A short, readable name for an event, for exact-order assertions."""
    it = item(event)
    if it.frame is not None:
        frame = it.frame
        if frame["frame"] == "text":
            return f"text{'!' if frame['final'] else ''}:{frame['text']}"
        return frame["frame"]
    if it.kind == "statusUpdate":
        status = it.body["status"]
        text = status.get("message", {}).get("parts", [{}])[0].get("text")
        word = status["state"].removeprefix("TASK_STATE_").lower()
        return f"{word}:{text}" if text else word
    return it.kind


# A task whose events come every 0.1 s for about two seconds (`/scenario slow`), against the
# test heartbeat of 0.3 s: heartbeats kept at open + k x interval fall between its events,
# where a cadence reset by each event would write none until 0.3 s after the last. A worker
# the box runs late delays events and heartbeats alike, so only one held back for most of
# those two seconds could push every heartbeat past the task's end.
CADENCE_TURNS = 20


def heartbeats_among_events(order: list[str]) -> int:
    """The heartbeats ("hb") read before the last task event ("event") of `order`."""
    last = len(order) - 1 - order[::-1].index("event")
    return order[:last].count("hb")


TERMINAL_STATES = ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED")


def is_terminal_event(event: SSEEvent) -> bool:
    it = item(event)
    return it.kind == "statusUpdate" and it.body["status"]["state"] in TERMINAL_STATES


def task_id_of(event: SSEEvent) -> str | None:
    it = item(event)
    return it.body.get("taskId") if it.kind in ("statusUpdate", "artifactUpdate") else None


def unknown_like(task_id: str) -> str:
    """An id of the same shape that no task has."""
    return task_id[:-4] + ("0000" if not task_id.endswith("0000") else "1111")


# --- watch streams ---

def send(port: int, text: str) -> str:
    """SendMessage with `text`; the new task's id."""
    status, _, body = rpc(port, "SendMessage", user_message(text))
    assert status == 200, body
    return body["result"]["task"]["id"]


def task_events(stream: SSEStream, task_id: str) -> list:
    """This task's events on a watch stream, up to and including its terminal status."""
    out = []
    for event in stream.events():
        if task_id_of(event) == task_id:
            out.append(event)
            if is_terminal_event(event):
                return out
    raise AssertionError("stream ended before the task did")


def watch(port: int, **kw) -> SSEStream:
    """A watch stream whose 200 head and connection-ack have been read."""
    stream = SSEStream(port, WATCH, {}, **kw)
    assert stream.status == 200
    first = stream.next()
    assert item(first).frame["frame"] == "connection-ack"
    return stream


def reset(stream: SSEStream) -> None:
    """Close the connection with a reset (SO_LINGER 0): the client is gone, not half-closed."""
    stream.http.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.http.close()

@contextlib.contextmanager
def watching_b_after_a_burst(tmp_path, n: int):
    """(A, B in front of it, a watcher on B that has read a burst of `n` to its end, the last
    id it read): the start of every restart-of-A test."""
    with running_gateway(tmp_path=tmp_path) as a, front_of(a, tmp_path) as b:
        rpc(b.port, "SendMessage", user_message(f"/scenario burst n={n}"))
        with SSEStream(b.port, WATCH, {}) as watcher:
            yield a, b, watcher, watcher.read_until(is_terminal_event)[-1].id


# --- full-replay storms (test_reconnect_storm.py, test_stall.py) ---

STORM_WATCHERS = 300  # a storm in the suite: a few hundred full replays


def full_ring(port: int, frames: int = 700) -> int:
    """Run a burst task of `frames` to its end; the newest id (its terminal status)."""
    status, _, answer = rpc(port, "SendMessage", user_message(f"/scenario burst n={frames}"))
    assert status == 200, answer
    task_id = answer["result"]["task"]["id"]
    with SSEStream(port, WATCH, last_event_id="0", timeout=30) as probe:
        seen = probe.read_until(lambda e: e.id is not None and task_id_of(e) == task_id and is_terminal_event(e))
    return seen[-1].id


def frame_of(data: str) -> dict | None:
    """The murmur frame a taskless carrier holds (gap, lagged, ...), or None."""
    return orjson.loads(data)["result"].get("message", {}).get("metadata", {}).get(STREAM_URI)


def read_replay(conn: Http, newest: int) -> tuple[list[int], list[str]]:
    """The ids a stream writes up to `newest`, and its unnumbered events' data."""
    parser, ids, unnumbered = SSEParser(), [], []
    while not ids or ids[-1] < newest:
        chunk = conn.read_chunk()
        assert chunk is not None, f"the stream ended after {ids[-1:]}"
        for event in parser.feed(chunk):
            if event.id is not None:
                ids.append(event.id)
            elif event.data is not None:
                unnumbered.append(event.data)
    return ids, unnumbered
