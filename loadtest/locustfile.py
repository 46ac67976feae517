"""Locust users for the gateway's three streams: watchers, task subscribers, streaming senders.

Each user is a `FastHttpUser` that opens its stream with `stream=True` and reads it line by
line with geventhttpclient's own `readline` (`resp._response.readline(b"\\n")`), which returns
as soon as a line is buffered. `iter_content` is not used: it waits for whole blocks and
delivers slow streams late or never (design-research §4). The stream is never read inside
`catch_response`, whose request is reported only when the block exits.

One locust request event is fired per SSE event, request type `SSE`, named by its kind: the
murmur frame's name for a frame (`text`, `lagged`, `gap`, `connection-ack`, ...), the
StreamResponse member otherwise (`statusUpdate`, `task`, `artifactUpdate`, `message`), and
`heartbeat`. Its response time is the delivery latency when the event carries a time: now
minus the `--sim-load` encode time at the start of a text frame (ns), else now minus the
status timestamp (ms); a heartbeat's is its distance from the expected interval
(`--heartbeat-interval`, 15 s by default). The stream opening is its own `POST` event.

    WatchUser       murmur.WatchSession, Last-Event-ID: 0
    SubscribeUser   SubscribeToTask on the `--sim-load` task (the oldest working task in
                    ListTasks), activated so it receives the text frames
    SendUser        SendStreamingMessage of a new task (the default script), read to its end

Headless, bounded, with CSV output (the gateway started with `--sim-load 100`):

    locust -f loadtest/locustfile.py --headless -u 200 -r 50 -t 60s --host http://127.0.0.1:52222 \\
      --csv out/sse --only-summary --stop-timeout 5 -L WARNING
"""

from __future__ import annotations

import datetime
import itertools
import re
import time

import orjson
from locust import FastHttpUser, between, events, task

STREAM_URI = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1"
SIM_STAMP = re.compile(r"^(\d{16,20}) ")
MAX_EVENTS_PER_STREAM = 100_000  # every read loop is bounded; a stream ends or the run stops it
_message_ids = itertools.count(1)


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--heartbeat-interval", type=float, default=15.0, include_in_web_ui=False,
                        help="the gateway's heartbeat interval, to report heartbeat jitter")


def event_kind(result: dict) -> tuple[str, float | None]:
    """(kind, encode time in seconds since the epoch or None) of one StreamResponse."""
    member = next(iter(result), "unknown")
    body = result.get(member) or {}
    frame = (body.get("metadata") or {}).get(STREAM_URI) or {}
    if "frame" in frame:
        match = SIM_STAMP.match(frame.get("text") or "") if frame["frame"] == "text" else None
        return frame["frame"], int(match.group(1)) / 1e9 if match else None
    stamp = (body.get("status") or {}).get("timestamp")
    if stamp:
        return member, datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return member, None


class SSEUser(FastHttpUser):
    abstract = True
    network_timeout = 60.0  # longer than a heartbeat interval
    connection_timeout = 10.0
    wait_time = between(0.5, 1.0)

    def fire(self, name: str, response_time_ms: float, length: int, exception=None) -> None:
        self.environment.events.request.fire(request_type="SSE", name=name, response_time=response_time_ms,
                                             response_length=length, exception=exception, context={})

    def stream(self, method: str, params: dict, headers: dict | None = None) -> None:
        """Open one stream, fire an event per SSE event, return when it ends."""
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        opened = time.monotonic()
        resp = self.client.request(
            "POST", "/", data=body, stream=True, name=method,  # type: ignore[arg-type]  # locust's stubs: bytes work
            headers={"Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})})
        content_type = resp.headers.get("content-type", "") if resp.headers is not None else ""
        if resp.status_code != 200 or not str(content_type).startswith("text/event-stream"):
            return
        interval = self.environment.parsed_options.heartbeat_interval if self.environment.parsed_options else 15.0
        last_beat = opened
        data, size = None, 0
        reader = resp._response  # geventhttpclient's response: readline returns per buffered line
        assert reader is not None  # a response was read: its status is above
        for _ in range(MAX_EVENTS_PER_STREAM * 4):
            line = reader.readline(b"\n")
            if not line:
                return
            size += len(line)
            if line.startswith(b"data: "):
                data = line[6:]
            elif line.startswith(b":"):
                now = time.monotonic()
                self.fire("heartbeat", abs(now - last_beat - interval) * 1000, size)
                last_beat, size = now, 0
            elif line == b"\n":
                if data is not None:
                    self._fire_event(data, size)
                data, size = None, 0

    def _fire_event(self, data: bytes, size: int) -> None:
        try:
            response = orjson.loads(data)
            kind, encoded_at = event_kind(response.get("result") or {"error": response.get("error")})
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            self.fire("unparsable", 0, size, exc)
            return
        latency = (time.time() - encoded_at) * 1000 if encoded_at else 0
        self.fire(kind, max(0.0, latency), size)


class WatchUser(SSEUser):
    weight = 8

    @task
    def watch(self) -> None:
        self.stream("murmur.WatchSession", {}, {"Last-Event-ID": "0"})


class SubscribeUser(SSEUser):
    weight = 1

    def load_task_id(self) -> str | None:
        """The `--sim-load` task: the oldest working task (ids are time-ordered)."""
        body = orjson.dumps({"jsonrpc": "2.0", "id": "list", "method": "ListTasks", "params": {}})
        resp = self.client.request("POST", "/", data=body, name="ListTasks",  # type: ignore[arg-type]  # as above
                                   headers={"Content-Type": "application/json", "A2A-Version": "1.0"})
        tasks = ((orjson.loads(resp.content or b"{}").get("result") or {}).get("tasks")) or []
        working = [t["id"] for t in tasks if t["status"]["state"] == "TASK_STATE_WORKING"]
        return min(working) if working else None

    @task
    def subscribe(self) -> None:
        task_id = self.load_task_id()
        if task_id is not None:
            self.stream("SubscribeToTask", {"id": task_id}, {"A2A-Extensions": STREAM_URI})


class SendUser(SSEUser):
    weight = 1

    @task
    def send(self) -> None:
        message = {"messageId": f"locust-{next(_message_ids)}-{time.monotonic_ns()}", "role": "ROLE_USER",
                   "parts": [{"text": "Summarise README.md"}]}
        self.stream("SendStreamingMessage", {"message": message}, {"A2A-Extensions": STREAM_URI})
