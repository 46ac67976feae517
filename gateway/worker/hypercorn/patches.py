"""Every reach into another library's internals, as one table: what is replaced, what is followed.

The adapter runs hypercorn with some of its attributes replaced (http11_fixes.py,
h2_backpressure.py, h2_limits.py) and follows other internals it does not replace: the
`__self__` step from hypercorn's HTTP/1.1 protocol to its TCPServer's reader and writer
(http11_fixes.py), the h11 and h2 state those replacements read, and uvloop's transport for
each accepted socket (http/accept.py). Each is a `Row` of `TABLE`: the owner (a class or module,
by dotted name), the attribute, what replaces it (None where it is only followed) and the
library it reaches into. `problem` checks rows against the code installed (each attribute
where it is expected), not against a version number: a release that keeps what a row follows
keeps its row, one that moved it is named.

Almost every row is a guarantee row (`guarantee` set): part of what the gateway promises on
a path hypercorn serves, its HTTP/1.1 (`HTTP11`: the status line's reason phrase, a stream's
end that closes its connection, a client's FIN on a stream, no ambiguous head served) and
its HTTP/2 (`H2`: a stalled stream's memory is bounded, one stream over the limit refused
alone, no client input raising out of hypercorn). serving.py checks every group before it
installs any; where a guarantee's rows moved, the gateway stops offering what it cannot
bound (HTTP/2, keep-alive inside hypercorn) rather than serving it unbounded. The two rows with no guarantee are
http/accept.py's: uvloop's `connect_accepted_socket` (asyncio's public interface, as uvloop
implements it) and the `_accept` beneath Python's `socket.accept`: nothing can fall back
from them, so only tests/test_hypercorn_adapter.py checks them (`internals_problem`).

A row whose attribute is set on each instance (not the class) names the method whose code
sets it (`named_in`), and so does a bound method handed on to another object (how
http11_fixes.py's step to the TCPServer is made): the check is that the method's code still
names the attribute.

Test-only: with MURGW_TEST_INTERNALS_MOVED set, every group is reported moved, so the suites
can run the fallback paths on the libraries they have.
"""

from __future__ import annotations

import importlib
import os
from typing import NamedTuple

HC = "hypercorn."
ADAPTER = "gateway.worker.hypercorn."
HTTP11 = "http11"  # hypercorn's HTTP/1.1 path: http11_fixes.py
H2 = "h2"  # hypercorn's HTTP/2 path: h2_backpressure.py, h2_limits.py
TEST_SWITCH = "MURGW_TEST_INTERNALS_MOVED"


class Row(NamedTuple):
    owner: str  # "module:Class" or "module"
    name: str
    replacement: str | None  # "module:name" put in its place by `install`; None: followed only
    against: str  # the library it reaches into: hypercorn, h11, h2, priority, uvloop, or python (the standard library)
    named_in: str | None = None  # the owner's method whose code names `name` (set per instance, or handed on)
    guarantee: str | None = None  # HTTP11 or H2: what the gateway promises rests on it; None: speed only


TABLE = (
    # http11_fixes.py
    Row(HC + "protocol.h11:H11Protocol", "handle", ADAPTER + "http11_fixes:handle", "hypercorn", guarantee=HTTP11),
    Row(HC + "protocol.h11:H11Protocol", "_send_h11_event", ADAPTER + "http11_fixes:send_h11_event", "hypercorn", guarantee=HTTP11),
    Row(HC + "protocol.h11:H11Protocol", "_maybe_recycle", ADAPTER + "http11_fixes:maybe_recycle", "hypercorn", guarantee=HTTP11),
    Row(HC + "protocol.h11:H11Protocol", "_send_error_response", ADAPTER + "http11_fixes:send_error_response",
        "hypercorn", guarantee=HTTP11),
    Row(HC + "protocol.h11:H11Protocol", "_close_stream", None, "hypercorn", guarantee=HTTP11),
    # no ambiguous head served, no h2c upgrade, HTTP/1.0 pipelining (hostile HTTP)
    Row(HC + "protocol.h11:H11Protocol", "_check_protocol", ADAPTER + "http11_fixes:check_protocol", "hypercorn",
        guarantee=HTTP11),
    Row(HC + "protocol.h11:H11Protocol", "_create_stream", ADAPTER + "http11_fixes:create_stream", "hypercorn",
        guarantee=HTTP11),
    Row("h11._receivebuffer:ReceiveBuffer", "maybe_extract_lines", ADAPTER + "http11_fixes:maybe_extract_lines", "h11",
        guarantee=HTTP11),
    Row("h11._receivebuffer:ReceiveBuffer", "_data", None, "h11", "__init__", guarantee=HTTP11),
    Row("h11._connection:Connection", "_extract_next_receive_event",
        ADAPTER + "http11_fixes:extract_next_receive_event", "h11", guarantee=HTTP11),
    Row("h11._connection:Connection", "_receive_buffer", None, "h11", "__init__", guarantee=HTTP11),
    *(Row(HC + "protocol.h11:H11Protocol", name, None, "hypercorn", "__init__", guarantee=HTTP11)
      for name in ("stream", "can_read", "connection")),
    # http11_fixes.py's `_tcp_server`: the protocol's send.__self__ (the TCPServer, its
    # protocol_send handed on through the ProtocolWrapper), whose reader tells a client's EOF
    # and whose writer's transport corks a stream's end with its FIN
    Row(HC + "protocol.h11:H11Protocol", "send", None, "hypercorn", "__init__", guarantee=HTTP11),
    Row(HC + "protocol:ProtocolWrapper", "send", None, "hypercorn", "__init__", guarantee=HTTP11),
    Row(HC + "asyncio.tcp_server:TCPServer", "protocol_send", None, "hypercorn", "run", guarantee=HTTP11),
    *(Row(HC + "asyncio.tcp_server:TCPServer", name, None, "hypercorn", "__init__", guarantee=HTTP11)
      for name in ("reader", "writer")),
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
    # http/accept.py accepts with the call beneath socket.accept (no IntEnum reads a connection)
    # and hands each accepted socket to uvloop's own transport
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


GUARANTEES = {kind: tuple(row for row in TABLE if row.guarantee == kind) for kind in (HTTP11, H2)}


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
