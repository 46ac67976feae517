"""Logs: one JSON object a line on stderr, from every process, naming its role and pid.

`get(role).warning("event text", key=value)` writes
``{"ts": …, "level": "warning", "role": …, "pid": …, "event": "event text", "key": value}``.
Nothing a client sends as a secret (tokens) is ever passed here.

A process whose loop writes many lines a turn (a worker: two access-log lines a stream, and
a reconnect storm opens dozens a turn) calls `per_turn(loop)`: its lines are then written
together once the turn's callbacks have run, one write for them all, rather than one write
and flush each; `flush` writes what waits (a process's last act).

`setup` routes what Python and the libraries would print to stderr as plain text through
the same lines: records of the standard `logging` module (asyncio's "Exception in callback",
uvloop's and hypercorn's warnings), `warnings.warn`, and exceptions no code caught (the main
thread's, another thread's, one raised where Python can only report it: `__del__`, a
callback of the garbage collector). Each is one line, its traceback in an `exc` field, so a
pipeline that parses every line never meets one that is not JSON (SECURITY.md, logs).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback

import orjson

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_threshold = LEVELS["info"]
_pid = os.getpid()  # a system call each time otherwise (glibc keeps no copy)
_loop = None  # set by `per_turn`: lines wait in `_waiting` for the turn's end
_loop_thread = 0
_waiting: list[bytes] = []


def _forget_parent() -> None:
    global _pid, _loop
    _pid, _loop = os.getpid(), None
    _waiting.clear()


os.register_at_fork(after_in_child=_forget_parent)


def setup(level: str, role: str) -> None:
    """The lowest level written, and what Python and the libraries report routed through
    `role`'s lines (each process calls it once, at start)."""
    global _threshold
    _threshold = LEVELS[level]
    routed = get(role)
    handler = _Records(routed)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    logging.captureWarnings(True)  # warnings.warn: a record of the `py.warnings` logger
    sys.excepthook = lambda kind, value, tb: routed.error("uncaught exception", exc=_traceback(kind, value, tb))
    threading.excepthook = lambda hook: routed.error(
        "uncaught exception in a thread", thread=getattr(hook.thread, "name", None),
        exc=_traceback(hook.exc_type, hook.exc_value, hook.exc_traceback))
    sys.unraisablehook = lambda hook: routed.error(
        "exception ignored", where=hook.err_msg or None, object=repr(hook.object),
        exc=_traceback(hook.exc_type, hook.exc_value, hook.exc_traceback))


def _traceback(kind, value, tb) -> str:
    return "".join(traceback.format_exception(kind, value, tb)).rstrip("\n")


class _Records(logging.Handler):
    """A `logging` record as one of the gateway's lines: its level, message and logger."""

    def __init__(self, routed: Logger):
        super().__init__()
        self.routed = routed

    def emit(self, record: logging.LogRecord) -> None:
        level = max((name for name, number in LEVELS.items() if number <= record.levelno),
                    key=LEVELS.__getitem__, default="debug")
        fields = {"logger": record.name}
        if record.exc_info and record.exc_info[0] is not None:
            fields["exc"] = _traceback(*record.exc_info)
        try:
            message = record.getMessage()
        except Exception as error:  # a library's record whose arguments do not fit its format
            message = f"{record.msg!r} {record.args!r} ({error!r})"
        self.routed.write(level, message, fields)


def per_turn(loop) -> None:
    """From now on, lines logged on `loop`'s thread are written at the end of its turn (see
    the docstring); another thread's lines are written at once."""
    global _loop, _loop_thread
    _loop, _loop_thread = loop, threading.get_ident()


def flush() -> None:
    """Write every line that waits."""
    if _waiting:
        count = len(_waiting)
        lines = b"".join(_waiting[:count])
        del _waiting[:count]
        _out(lines)


def _out(data: bytes) -> None:
    try:
        sys.stderr.buffer.write(data)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed stderr must not take a server process down


class Logger:
    def __init__(self, role: str):
        self.role = role

    @staticmethod
    def wants(level: str) -> bool:
        """Whether a line at `level` is written (so a caller may skip making its fields)."""
        return LEVELS[level] >= _threshold

    def write(self, level: str, event: str, fields: dict) -> None:
        """A line of `fields` (a dict the caller made and gives up: no keywords unpacked)."""
        if LEVELS[level] < _threshold:
            return
        record = {"ts": round(time.time(), 3), "level": level, "role": self.role,
                  "pid": _pid, "event": event, **fields}
        line = orjson.dumps(record, default=str) + b"\n"
        if _loop is None or _loop.is_closed() or threading.get_ident() != _loop_thread:
            flush()  # what waits first (its loop closed with lines waiting), then this line
            _out(line)
            return
        if not _waiting:
            _loop.call_soon(flush)
        _waiting.append(line)

    def debug(self, event: str, **fields) -> None:
        self.write("debug", event, fields)

    def info(self, event: str, **fields) -> None:
        self.write("info", event, fields)

    def warning(self, event: str, **fields) -> None:
        self.write("warning", event, fields)

    def error(self, event: str, **fields) -> None:
        self.write("error", event, fields)


def get(role: str) -> Logger:
    return Logger(role)
