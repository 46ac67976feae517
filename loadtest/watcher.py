"""One SSE connection of the load kit, read and checked: the driver's, the storm's and idle20k's.

`Watcher` is a raw `asyncio.Protocol` (no HTTP library): it writes the request, reads the
response head, undoes chunked framing when the server used it, and scans whole SSE events with
a few compiled regular expressions per read, so the client spends microseconds per event, not
per byte. It checks every id as loadtest/driver.py's docstring says (murmur: numeric ids,
`lagged` and `gap` frames; nchan: `<time>:<tag>` ids and the publisher's sequence numbers), and
counts into its process's `Tally`. `build_request` writes the stream's request (with the
`Authorization` line loadtest/bearer.py gives), `open_watcher` connects one by a deadline and
names why an opening failed.
"""

from __future__ import annotations

import array
import asyncio
import errno
import re
import time
from urllib.parse import urlsplit

import orjson

MURMUR_ID = re.compile(rb"(?m)^id: (\d+)$")
MURMUR_MARKS = re.compile(
    rb'(?m)^id: (\d+)$|"frame":"lagged","missed":(\d+)|"frame":"gap","firstAvailableId":(\d+)')
NCHAN_ID = re.compile(rb"(?m)^id: (\d+):(\d+)$")
NCHAN_SEQ = re.compile(rb'"text":"\d+ (\d+) ')
STAMP = re.compile(rb'"text":"(\d{16,20}) ')
HEARTBEAT = b":heartbeat\n"


class Tally:
    """One client process's figures; counting (but not checking) happens inside the window."""

    def __init__(self, sample_every: int):
        self.sample_every = sample_every
        self.measuring = False
        self.newest_id = 0
        self.opened = self.failed = self.closed_early = 0
        self.failures: dict[str, int] = {}  # why openings failed: reason -> count
        self.deliveries = self.bytes = self.stamped = 0
        self.events_lost = self.lagged_frames = self.unexplained_holes = self.order_violations = 0
        self.latency_us = array.array("q")
        self.arrived_ms = array.array("q")  # when each timed event arrived (epoch ms), beside its latency
        self.heartbeat_s = array.array("d")

    def fail(self, reason: str, count: int = 1) -> None:
        self.failed += count
        self.failures[reason] = self.failures.get(reason, 0) + count

    def stamps(self, block: bytes, now_ns: int) -> None:
        """Time one load event in `sample_every` (0: none)."""
        stamps = STAMP.findall(block) if self.sample_every else None
        if stamps:
            every = self.sample_every
            start = -self.stamped % every
            self.stamped += len(stamps)
            timed = [(now_ns - int(s)) // 1000 for s in stamps[start::every]]
            self.latency_us.extend(timed)
            self.arrived_ms.extend([now_ns // 1_000_000] * len(timed))


class HttpStatus(ConnectionError):
    """The server answered the stream request with a status other than 200."""

    def __init__(self, status_line: str):
        super().__init__(status_line)
        parts = status_line.split()
        self.status = parts[1] if len(parts) > 1 else "?"


class Watcher(asyncio.Protocol):
    """One SSE connection: the head, then whole events checked and counted.

    `resume_from` is the Last-Event-ID the request sent (murmur): the first id must then be
    the next one, unless a gap frame says why not. `connected_at` and `first_id_at` are the
    monotonic times the TCP connection was made and the first numbered event arrived (the
    first replayed one, when the buffer held any)."""

    started_at: float  # storm.py's: when it began to connect
    head_at: float  # storm.py's: when its response head was read

    def __init__(self, tally: Tally, request: bytes, dialect: str, resume_from: int = 0):
        self.tally, self.request = tally, request
        self.check = self._check_murmur if dialect == "murmur" else self._check_nchan
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future = asyncio.get_running_loop().create_future()
        self.head = b""
        self.chunked = False
        self.chunk_left = 0  # body bytes left in the current chunk; -1: expecting a size line
        self.raw = b""       # framing bytes not yet decoded
        self.rest = b""      # decoded body after the last complete event
        self.last = resume_from  # the last id (murmur) or sequence number (nchan) received
        self.last_key = 0    # nchan: the last `<time>:<tag>` as one integer
        self.explained = 0   # murmur: events a lagged frame reported since the last id
        self.gap = False
        self.heartbeat_at = 0.0
        self.ended = False
        self.connected_at = self.first_id_at = 0.0
        self.gap_frames = self.missed = 0  # murmur: gap frames and lagged `missed`, always counted

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.connected_at = time.monotonic()
        transport.write(self.request)

    def connection_lost(self, exc) -> None:
        if not self.opened.done():
            reason = exc if isinstance(exc, OSError) else ConnectionError("closed before the head")
            self.opened.set_exception(reason)
        elif not self.ended:
            self.ended = True
            self.tally.closed_early += 1

    def data_received(self, data: bytes) -> None:
        if not self.opened.done():
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.head[:end].lower(), self.head[end + 4:]
            self.head = b""
            if head[9:12] != b"200":
                self.opened.set_exception(HttpStatus(head.split(b"\r\n", 1)[0].decode()))
                return
            self.chunked = b"transfer-encoding: chunked" in head
            self.chunk_left = -1
            self.heartbeat_at = time.monotonic()
            self.opened.set_result(None)
        if self.chunked:
            data = self._dechunk(data)
        self._body(data)

    def _dechunk(self, data: bytes) -> bytes:
        buf = self.raw + data if self.raw else data
        out, pos, size = [], 0, len(buf)
        while pos < size:
            if self.chunk_left > 0:
                take = min(self.chunk_left, size - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self.chunk_left -= take
                continue
            if self.chunk_left == 0:  # the CRLF after a chunk's data
                if size - pos < 2:
                    break
                pos += 2
                self.chunk_left = -1
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                break
            self.chunk_left = int(buf[pos:line_end].split(b";", 1)[0], 16)
            pos = line_end + 2
            if self.chunk_left == 0:  # the last chunk: the response ended
                self.chunk_left = -2
                break
        self.raw = buf[pos:] if self.chunk_left != -2 else b""
        return b"".join(out)

    def _body(self, data: bytes) -> None:
        if self.rest:
            data = self.rest + data
        end = data.rfind(b"\n\n")
        if end < 0:
            self.rest = data
            return
        block, self.rest = data[:end + 2], data[end + 2:]
        tally = self.tally
        if tally.measuring:
            now_ns = time.time_ns()
            count = self.check(block)
            tally.deliveries += count
            tally.bytes += len(block)
            tally.stamps(block, now_ns)
            if HEARTBEAT in block:
                now = time.monotonic()
                tally.heartbeat_s.append(now - self.heartbeat_at)
                self.heartbeat_at = now
        else:
            self.check(block)
            if HEARTBEAT in block:
                self.heartbeat_at = time.monotonic()

    # --- id checks: a fast path for the usual run of consecutive ids, a walk otherwise ---

    def _check_murmur(self, block: bytes) -> int:
        ids = MURMUR_ID.findall(block)
        if ids and not self.first_id_at:
            self.first_id_at = time.monotonic()
        if b'"frame":"lagged"' in block or b'"frame":"gap"' in block:
            self._walk_murmur(block)
        elif ids:
            nums = list(map(int, ids))
            first = nums[0]
            if (self.last and first != self.last + 1) or nums != list(range(first, first + len(nums))):
                self._walk_murmur(block)
            else:
                self.last = nums[-1]
        if self.last > self.tally.newest_id:
            self.tally.newest_id = self.last
        return len(ids)

    def _walk_murmur(self, block: bytes) -> None:
        tally = self.tally
        for event_id, missed, first_available in MURMUR_MARKS.findall(block):
            if missed:
                self.explained += int(missed)
                self.missed += int(missed)
                if tally.measuring:
                    tally.events_lost += int(missed)
                    tally.lagged_frames += 1
            elif first_available:
                self.gap = True
                self.gap_frames += 1
            else:
                self._next(int(event_id))

    def _next(self, number: int) -> None:
        """Check one id against the previous: ascending, and every hole accounted for."""
        tally = self.tally
        if self.last:
            if number <= self.last:
                tally.order_violations += 1
                return
            hole = number - self.last - 1
            if hole and not self.gap and hole != self.explained:
                tally.unexplained_holes += 1
        self.last, self.explained, self.gap = number, 0, False

    def _check_nchan(self, block: bytes) -> int:
        keys = [int(t) << 32 | int(tag) for t, tag in NCHAN_ID.findall(block)]
        if keys and (keys[0] <= self.last_key or keys != sorted(set(keys))):
            for key in keys:
                if key <= self.last_key:
                    self.tally.order_violations += 1
                self.last_key = max(self.last_key, key)
        elif keys:
            self.last_key = keys[-1]
        if keys and not self.first_id_at:
            self.first_id_at = time.monotonic()
        tally = self.tally
        for seq in map(int, NCHAN_SEQ.findall(block)):
            if self.last and seq <= self.last:
                tally.order_violations += 1
                continue
            if self.last and seq > self.last + 1:
                tally.unexplained_holes += 1
                if tally.measuring:
                    tally.events_lost += seq - self.last - 1
            self.last = seq
        if self.last > tally.newest_id:
            tally.newest_id = self.last
        return len(keys)

    def close(self) -> None:
        self.ended = True
        if self.transport is not None:
            self.transport.abort()


def build_request(url: str, dialect: str, method: str, last_event_id: int, authorization: bytes = b"") -> bytes:
    """The stream's request; `authorization` an `Authorization:` header line (loadtest/bearer.py) or b""."""
    parts = urlsplit(url)
    host, path = parts.netloc, parts.path or "/"
    if dialect == "nchan":
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}})
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nAccept: text/event-stream\r\nLast-Event-ID: {last_event_id}\r\n").encode() + (
            authorization + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def failure_reason(exc: BaseException, stage: str) -> str:
    """A short name for why an opening failed; `stage` is "connect" or "head"."""
    if isinstance(exc, HttpStatus):
        return f"http {exc.status}"
    if isinstance(exc, asyncio.TimeoutError):
        return f"{stage} timeout"
    if isinstance(exc, ConnectionRefusedError):
        return f"{stage} refused"
    if isinstance(exc, ConnectionResetError):
        return f"{stage} reset"
    if isinstance(exc, OSError) and exc.errno:
        return f"{stage} {errno.errorcode.get(exc.errno, exc.errno)}"
    return f"{stage} closed"


async def open_watcher(watcher: Watcher, host: str, port: int, deadline: float) -> str | None:
    """Connect `watcher` and wait for a 200 head, both by `deadline` (loop time); None when
    it is open, else why not (failure_reason). The watcher is closed when it failed."""
    loop = asyncio.get_running_loop()
    stage = "connect"
    try:
        await asyncio.wait_for(loop.create_connection(lambda: watcher, host, port),
                               max(0.1, deadline - loop.time()))
        stage = "head"
        await asyncio.wait_for(watcher.opened, max(0.1, deadline - loop.time()))
    except (TimeoutError, OSError, ConnectionError) as exc:
        watcher.close()
        return failure_reason(exc, stage)
    except asyncio.CancelledError:
        watcher.close()
        raise
    return None
