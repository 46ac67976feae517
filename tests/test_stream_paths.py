"""The front (gateway/worker/http/front.py) serves an HTTP/1.1 stream from its first byte; the
bytes on the wire are those hypercorn writes (with the plain ASGI sink,
gateway/worker/hypercorn/asgi.py): each case runs on a gateway with the front and on one with
the test-only switch `MURGW_TEST_STREAM_PATH=hypercorn` (every connection straight to
hypercorn), and the bytes are compared: head, chunks, heartbeats, the end, a reset, a
half-close, a stalled reader that lags. The streams hypercorn serves with the front on (one
on a keep-alive connection it holds, an HTTP/1.0 one) are served alike too.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct

import orjson
import pytest

from gateway.protocol.parser import SSEParser
from gateway.worker.http.framing import chunk
from gateway.worker.http.front import SWITCH
from gateway_harness import running_gateway, scrape, wait_for
from http_client import user_message
from raw_http import dechunk, post, read_answer, read_to_close, until_close
from sse_reading import SSEStream, is_terminal_event, reset, send, task_id_of

PATHS = {"front": {}, "hypercorn": {SWITCH: "hypercorn"}}
OPEN = 'murgw_connections_open{endpoint="murmur.WatchSession"}'
# ids and timestamps differ between runs; each is replaced by a mark of the same length, so
# every chunk's size line still compares
VARYING = re.compile(rb"(msg|tsk|ctx|art)_[0-9a-f]{32}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def normalised(raw: bytes) -> bytes:
    return VARYING.sub(lambda m: b"#" * len(m.group(0)), raw)


@contextlib.contextmanager
def both_paths(tmp_path_factory, *args: str, **options):
    """One single-worker gateway on each path: {"front": gateway, "hypercorn": gateway}."""
    with contextlib.ExitStack() as stack:
        yield {path: stack.enter_context(running_gateway(*args, workers=1, metrics=True, env=env,
                                                         tmp_path=tmp_path_factory.mktemp(path), **options))
               for path, env in PATHS.items()}


@pytest.fixture(scope="module")
def gateways(tmp_path_factory):
    """Both paths at once: {"front": gateway, "hypercorn": gateway}."""
    with both_paths(tmp_path_factory, "--header-timeout", "120", heartbeat=0.3) as running:
        yield running


def read_until(sock: socket.socket, done) -> bytes:
    data = b""
    while not done(data):
        chunk = sock.recv(65536)
        assert chunk, f"closed early: {data!r}"
        data += chunk
    return data


HEARTBEAT_CHUNK = b"c\r\n:heartbeat\n\n\r\n"


def watch_bytes(port: int) -> bytes:
    """A watch's head, its connection-ack and its first two heartbeats, exactly."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        return watch_on(sock)


def watch_on(sock: socket.socket) -> bytes:
    """`watch_bytes` on a connection already open."""
    sock.sendall(post("murmur.WatchSession", {}))
    data = read_until(sock, lambda d: d.count(HEARTBEAT_CHUNK) >= 2)
    return data[:data.index(HEARTBEAT_CHUNK, data.index(HEARTBEAT_CHUNK) + 1) + len(HEARTBEAT_CHUNK)]


def each(gateways, answer) -> dict:
    return {path: answer(gw) for path, gw in gateways.items()}


def test_a_task_stream_head_events_and_end(gateways):
    def answer(gw):
        raw = until_close(gw.port, post("SendStreamingMessage", user_message("hello")))
        head, _, body = raw.partition(b"\r\n\r\n")
        # whole chunks, the terminating chunk, then the close; how the events are grouped
        # into chunks follows the timing, so the head and the events compare
        return head, normalised(dechunk(body))
    answers = each(gateways, answer)
    assert answers["front"] == answers["hypercorn"]


def test_a_watch_head_ack_and_heartbeats(gateways):
    answers = each(gateways, lambda gw: normalised(watch_bytes(gw.port)))
    assert answers["front"] == answers["hypercorn"]


def test_a_half_closed_watcher_has_left(gateways):
    def answer(gw):
        raw = until_close(gw.port, post("murmur.WatchSession", {}), half_close=True)
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="the stream ended")
        # before the close: the head, perhaps the ack and heartbeats, never an end chunk
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and not raw.endswith(b"0\r\n\r\n")
        return raw.partition(b"\r\n\r\n")[0]
    answers = each(gateways, answer)
    assert answers["front"] == answers["hypercorn"]


def test_a_reset_watcher_has_left(gateways):
    for gw in gateways.values():
        with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
            sock.sendall(post("murmur.WatchSession", {}))
            read_until(sock, lambda d: HEARTBEAT_CHUNK in d)
            wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 1, what="the stream open")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="the reset noticed")


LAGGED = b'"frame":"lagged"'
DIGITS = re.compile(rb"\d+")


HEAD = "murgw_ring_head_id"
PAST_ANY_BUFFER = 3000  # events: ~1.2 MB at 400 B, far past the socket buffers and the high-water mark


def whole_chunks(body: bytes) -> tuple[bytes, int]:
    """The bytes of the whole chunks read of a chunked `body`, each framed, and where the
    first one not yet whole (or its size line) starts."""
    events, at = b"", 0
    while True:
        line_end = body.find(b"\r\n", at)
        if line_end < 0:  # read up to a chunk's end, or into its size line
            return events, at
        size = int(body[at:line_end], 16)
        if line_end + 4 + size > len(body):
            return events, at
        assert body[line_end + 2 + size:line_end + 4 + size] == b"\r\n"
        events += body[line_end + 2:line_end + 2 + size]
        at = line_end + 4 + size


def lagged_chunk(gw) -> bytes:
    """A watcher that stops reading under load: the chunk carrying its `lagged` frame once it
    reads again, ids, counts and sizes masked (they follow the timing)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(post("murmur.WatchSession", {}))
        first = read_until(sock, lambda d: b"\r\n\r\n" in d)
        start = scrape(gw.metrics_port)[HEAD]
        wait_for(lambda: scrape(gw.metrics_port)[HEAD] > start + PAST_ANY_BUFFER, timeout=60,
                 what="the ring far past what the stalled watcher's buffers hold")
        data = read_until(sock, lambda d: LAGGED in d and d.find(b"\n\n", d.find(LAGGED)) > 0)
    body = (first + data).partition(b"\r\n\r\n")[2]
    events, at = whole_chunks(body)
    line_end = body.find(b"\r\n", at)
    if line_end >= 0:  # then the partial last one, past its size line
        events += body[line_end + 2:]
    where = events.find(LAGGED)
    frame = events[events.rfind(b"data:", 0, where):events.find(b"\n\n", where) + 2]
    return DIGITS.sub(b"#", normalised(frame))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Both paths at once, each under 500 events a second."""
    with both_paths(tmp_path_factory, "--sim-load", "500", "--sim-load-size", "300") as running:
        yield running


def test_a_stalled_reader_lags_alike(loaded):
    answers = each(loaded, lagged_chunk)
    assert answers["front"] == answers["hypercorn"]
    assert answers["front"].startswith(b"data: ") and LAGGED in answers["front"]


def test_a_chunk_is_framed_as_h11_frames_it_once_per_body():
    """The pass hands one shared batch to every watcher in step: framed once, and each body
    framed as its own, whatever came before it (h11's framing: hex size, CRLF, data, CRLF)."""
    batch, other = b"id: 1\ndata: {}\n\n" * 3, b": heartbeat\n\n"
    first = chunk(batch)
    assert first == b"30\r\n" + batch + b"\r\n"
    assert chunk(batch) is first  # the watchers after the first: the same bytes, no copy
    assert chunk(other) == b"d\r\n: heartbeat\n\n\r\n"
    equal_not_same = bytes(bytearray(batch))
    assert chunk(equal_not_same) == first
    assert chunk(b"") == b"0\r\n\r\n"


def test_a_streams_end_and_its_close_arrive_together(gateways):
    """The head says keep-alive, yet the connection closes after a stream: a client that pools
    connections must find the close there once it has read the terminating chunk, or it sends
    its next request into a closing connection ("server disconnected"). Both paths write the terminating chunk and the FIN in one segment, so the read
    after the end finds the EOF at once, on every stream."""
    for gw in gateways.values():
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
                sock.sendall(post("SendStreamingMessage", user_message("hello")))
                read_until(sock, lambda d: d.endswith(b"\r\n0\r\n\r\n"))
                sock.setblocking(False)
                assert sock.recv(1) == b""  # BlockingIOError: the close was not there yet


def answer_bytes(port: int, request: bytes) -> bytes:
    """One answer with a Content-Length, read to its end on a connection that stays open."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(request)
        data = read_until(sock, lambda d: b"\r\n\r\n" in d)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(rest) < length:
            rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


@pytest.mark.parametrize("request_bytes", [
    post("murmur.WatchSession", {}).replace(b"A2A-Version: 1.0", b"A2A-Version: 9.0"),
    post("SubscribeToTask", {"id": "tsk_none"}),
    post("murmur.WatchSession", {}).replace(b'"params":{}', b'"params":[1]').replace(b"Length: 67", b"Length: 68"),
], ids=["A2A-Version", "unknown task", "params not an object"])
def test_a_refused_stream_request_reads_alike(gateways, request_bytes):
    answers = each(gateways, lambda gw: answer_bytes(gw.port, request_bytes))
    assert answers["front"] == answers["hypercorn"]
    assert answers["front"].startswith(b"HTTP/1.1 200 OK\r\n") and b'"error"' in answers["front"]


def events_of(body: bytes) -> list:
    """The events (not heartbeats) of a stream's body as read so far, its chunks' framing taken off."""
    return [event for event in SSEParser().feed(whole_chunks(body)[0]) if event.data is not None]


def ended_on_the_stream(data: bytes, task_id: str) -> bool:
    """Whether the stream read so far (head and whole chunks) carries `task_id`'s terminal event."""
    return any(task_id_of(event) == task_id and is_terminal_event(event)
               for event in events_of(data.partition(b"\r\n\r\n")[2]))


def test_a_watch_after_a_get_task_on_the_same_connection(gateways):
    """A stream requested on a keep-alive connection after a non-stream answer. With the front
    on, hypercorn holds the connection by then (the front handed it on with the GetTask), so
    it serves the stream, with the plain ASGI sink: the watch's head, replay, ack and
    heartbeats read as on a fresh connection, a task's events reach it, and its client's FIN
    ends it and closes the connection."""
    def read(watched: bytes) -> tuple[bytes, bytes]:
        head, _, body = watched.partition(b"\r\n\r\n")  # the grouping into chunks follows the timing
        return head, normalised(whole_chunks(body)[0])
    for gw in gateways.values():
        ended = until_close(gw.port, post("SendStreamingMessage", user_message("hello")))  # in the ring whole
        asked = next(filter(None, map(task_id_of, events_of(ended.partition(b"\r\n\r\n")[2]))))
        fresh = read(watch_bytes(gw.port))
        with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
            sock.sendall(post("GetTask", {"id": asked}))
            got, rest = read_answer(sock)
            assert not rest
            assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" not in got.lower()
            assert orjson.loads(got.partition(b"\r\n\r\n")[2])["result"]["id"] == asked
            data = watch_on(sock)
            assert read(data) == fresh
            wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 1, what="the stream open")
            told = send(gw.port, "again")
            data += read_until(sock, lambda more: ended_on_the_stream(data + more, told))
            sock.shutdown(socket.SHUT_WR)  # the watcher leaves
            read_to_close(sock)  # heartbeats perhaps, then the close (a hang fails here)
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="the stream ended")


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """Both paths at once, with no heartbeat for minutes."""
    with both_paths(tmp_path_factory, heartbeat=300) as running:
        yield running


@pytest.mark.parametrize("leave", [reset, SSEStream.close], ids=["reset", "fin"])
def test_a_client_that_leaves_is_noticed_before_any_heartbeat(quiet, leave):
    """A reset, or a FIN (on a stream, the watcher leaving), is noticed from the read side, with
    nothing written to the client: by the front, and by the ASGI sink's wait on `receive`."""
    for gw in quiet.values():
        watchers = [SSEStream(gw.port, "murmur.WatchSession", {}) for _ in range(5)]
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 5, what="five open")
        for watcher in watchers:
            leave(watcher)
        wait_for(lambda: scrape(gw.metrics_port)[OPEN] == 0, what="every close noticed")


def test_an_http_1_0_watcher_is_served_through_asgi_sends(loaded):
    """hypercorn's on both paths: a close-delimited stream, its events gapless."""
    for gw in loaded.values():
        with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
            sock.sendall(post("murmur.WatchSession", {}, version="1.0"))
            head, _, data = read_until(sock, lambda d: b"\r\n\r\n" in d).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n") or head.startswith(b"HTTP/1.0 200 OK\r\n")
            assert b"chunked" not in head.lower()
            parser, ids = SSEParser(), []
            while len(ids) < 20:
                ids += [int(event.id) for event in parser.feed(data) if event.id is not None]
                data = sock.recv(65536)
                assert data, "the stream ended early"
        assert ids == list(range(ids[0], ids[0] + len(ids)))
