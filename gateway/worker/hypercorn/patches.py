"""Every reach into another library's internals, as one table: what is replaced, what is followed.

The adapter runs hypercorn's HTTP/2 with some of its attributes replaced (h2_backpressure.py,
h2_limits.py, h2_idle.py) and follows other internals it does not replace: the h2 state those
replacements read, what serving.py needs to hand hypercorn one connection (its TCPServer, its
WorkerContext, its app wrapper), and uvloop's transport for each accepted socket
(http/accept.py). Each is a `Row` of `TABLE`: the owner (a class or module, by dotted name),
the attribute, what replaces it (None where it is only followed) and the library it reaches
into. `problem` checks rows against the code installed (each attribute
where it is expected), not against a version number: a release that keeps what a row follows
keeps its row, one that moved it is named.

Almost every row is a guarantee row (`guarantee` set): part of what the gateway promises on
the path hypercorn serves, HTTP/2 (`H2`: a stalled stream's memory is bounded, one stream
over the limit refused alone, no client input raising out of hypercorn, a connection with no
stream ended within --header-timeout; and the hand-off of an HTTP/2 connection to hypercorn
itself). serving.py checks the group before it installs it; where its rows moved, the gateway
stops offering HTTP/2 rather than serving it unbounded, and HTTP/1.1 goes on. (HTTP/1.1 is
the front's, gateway/worker/http/front.py: no row.) The two rows with no guarantee are
http/accept.py's: uvloop's `connect_accepted_socket` (asyncio's public interface, as uvloop
implements it) and the `_accept` beneath Python's `socket.accept`: nothing can fall back
from them, so only tests/e2e/test_hypercorn_adapter.py checks them (`internals_problem`).

A row whose attribute is set on each instance (not the class) names the method whose code
sets it (`named_in`): the check is that the method's code still names the attribute.

Test-only: with MURGW_TEST_INTERNALS_MOVED set, every group is reported moved, so the suites
can run the fallback paths on the libraries they have.
"""

from __future__ import annotations

import importlib
import os
from typing import NamedTuple

HC = "hypercorn."
ADAPTER = "gateway.worker.hypercorn."
H2 = "h2"  # hypercorn's HTTP/2 path: h2_backpressure.py, h2_limits.py, h2_idle.py
TEST_SWITCH = "MURGW_TEST_INTERNALS_MOVED"


class Row(NamedTuple):
    owner: str  # "module:Class" or "module"
    name: str
    replacement: str | None  # "module:name" put in its place by `install`; None: followed only
    against: str  # the library it reaches into: hypercorn, h2, priority, uvloop, or python (the standard library)
    named_in: str | None = None  # the owner's method whose code names `name` (set per instance, or handed on)
    guarantee: str | None = None  # H2: what the gateway promises rests on it; None: speed only


TABLE = (
    # h2_backpressure.py
    Row(HC + "protocol.h2:StreamBuffer", "pop", ADAPTER + "h2_backpressure:pop", "hypercorn", guarantee=H2),
    Row(HC + "protocol.h2", "BUFFER_LOW_WATER", None, "hypercorn", guarantee=H2),
    # a stream blocked on flow control ends when its client leaves (hostile HTTP/2)
    Row(HC + "protocol.h2:H2Protocol", "_close_stream", ADAPTER + "h2_backpressure:close_stream", "hypercorn",
        guarantee=H2),
    Row(HC + "protocol.h2:H2Protocol", "_window_updated", None, "hypercorn", guarantee=H2),
    Row(HC + "protocol.h2:H2Protocol", "stream_buffers", None, "hypercorn", "__init__", guarantee=H2),
    Row(HC + "protocol.h2:StreamBuffer", "close", None, "hypercorn", guarantee=H2),
    *(Row(HC + "protocol.h2:StreamBuffer", name, None, "hypercorn", "__init__", guarantee=H2)
      for name in ("buffer", "_paused", "_is_empty")),
    # h2_limits.py: the extra stream refused alone, DATA on finished streams credited (hostile HTTP/2)
    Row("h2.connection:H2Connection", "_receive_headers_frame", ADAPTER + "h2_limits:receive_headers_frame", "h2",
        guarantee=H2),
    Row("h2.connection", "_decode_headers", None, "h2", guarantee=H2),
    *(Row("h2.connection:H2Connection", name, None, "h2", "__init__", guarantee=H2)
      for name in ("decoder", "highest_inbound_stream_id", "_closed_streams", "_receive_headers_frame")),
    Row("h2.stream:StreamClosedBy", "SEND_RST_STREAM", None, "h2", guarantee=H2),
    Row(HC + "protocol.h2:H2Protocol", "_handle_events", ADAPTER + "h2_limits:handle_events", "hypercorn",
        guarantee=H2),
    Row(HC + "protocol.h2:H2Protocol", "streams", None, "hypercorn", "__init__", guarantee=H2),
    # h2_limits.py: a burst the priority tree would refuse ends its connection with GOAWAY, PRIORITY
    # signals ignored (no input raises out of hypercorn: hostile HTTP/2)
    Row(HC + "protocol.h2:H2Protocol", "_priority_updated", ADAPTER + "h2_limits:priority_updated", "hypercorn",
        guarantee=H2),
    *(Row(HC + "protocol.h2:H2Protocol", name, None, "hypercorn", "__init__", guarantee=H2)
      for name in ("priority", "client", "send")),
    Row(HC + "protocol.h2:H2Protocol", "_flush", None, "hypercorn", guarantee=H2),
    Row("priority:PriorityTree", "_maximum_streams", None, "priority", "__init__", guarantee=H2),
    # h2_idle.py: an HTTP/2 connection with no open stream ends within --header-timeout (GOAWAY),
    # and no close of hypercorn's waits for ever on a client that never reads
    Row(HC + "protocol.h2:H2Protocol", "initiate", ADAPTER + "h2_idle:initiate", "hypercorn", guarantee=H2),
    Row(HC + "protocol.h2:H2Protocol", "idle", None, "hypercorn", guarantee=H2),
    *(Row(HC + "protocol.h2:H2Protocol", name, None, "hypercorn", "__init__", guarantee=H2)
      for name in ("closed", "connection")),
    Row(HC + "asyncio.tcp_server:TCPServer", "_idle_timeout", ADAPTER + "h2_idle:idle_timeout", "hypercorn",
        guarantee=H2),
    Row(HC + "asyncio.tcp_server:TCPServer", "_close", ADAPTER + "h2_idle:close", "hypercorn", guarantee=H2),
    Row(HC + "asyncio.tcp_server:TCPServer", "_read_data", ADAPTER + "h2_idle:read_data", "hypercorn",
        guarantee=H2),
    *(Row(HC + "asyncio.tcp_server:TCPServer", name, None, "hypercorn", "__init__", guarantee=H2)
      for name in ("context", "config", "writer", "loop", "idle_task")),
    Row(HC + "asyncio.tcp_server:TCPServer", "protocol", None, "hypercorn", "run", guarantee=H2),
    Row(HC + "protocol:ProtocolWrapper", "protocol", None, "hypercorn", "__init__", guarantee=H2),
    # serving.py hands one HTTP/2 connection to hypercorn as its server callback does: a
    # TCPServer awaited on it, with the worker's WorkerContext (whose `terminated` is the stop)
    # and the app wrapped as hypercorn wraps it
    Row(HC + "asyncio.tcp_server:TCPServer", "__await__", None, "hypercorn", guarantee=H2),
    Row(HC + "asyncio.worker_context:WorkerContext", "terminated", None, "hypercorn", "__init__", guarantee=H2),
    Row(HC + "utils", "wrap_app", None, "hypercorn", guarantee=H2),
    # http/accept.py accepts with the call beneath socket.accept (no IntEnum reads a connection)
    # and hands each accepted connection to uvloop's own transport: a plain one as its descriptor
    # (`Accepted`: uvloop reads its family, type and fileno, and calls its close with the transport's)
    Row("socket:socket", "_accept", None, "python"),
    Row("uvloop:Loop", "connect_accepted_socket", None, "uvloop"),
)


def resolve(dotted: str):
    """The object a "module:qualname" (or "module") names."""
    module, _, qualname = dotted.partition(":")
    found = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    return found


def _row_holds(row: Row) -> bool:
    try:
        owner = resolve(row.owner)
        if row.named_in is None:
            return hasattr(owner, row.name)
        return row.name in getattr(owner, row.named_in).__code__.co_names
    except (ImportError, AttributeError):
        return False


GUARANTEES = {H2: tuple(row for row in TABLE if row.guarantee == H2)}


def problem(rows: tuple[Row, ...]) -> str | None:
    """What of `rows` is not where the code installed has it; None when every row holds."""
    if os.environ.get(TEST_SWITCH):
        return f"{TEST_SWITCH} is set (tests only)"
    moved = [f"{row.against}: {row.owner}.{row.name}" for row in rows if not _row_holds(row)]
    return f"internals moved: {', '.join(moved)}" if moved else None


def install(rows: tuple[Row, ...]) -> None:
    """Put the replacements of `rows` in place (this process only; `problem` first)."""
    for row in rows:
        if row.replacement is not None:
            setattr(resolve(row.owner), row.name, resolve(row.replacement))
