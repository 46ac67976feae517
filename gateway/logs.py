"""Logs: one JSON object a line on stderr, from every process, naming its role and pid.

`get(role).warning("event text", key=value)` writes
``{"ts": …, "level": "warning", "role": …, "pid": …, "event": "event text", "key": value}``.
Nothing a client sends as a secret (tokens) is ever passed here.

A process whose loop writes many lines a turn (a worker: two access-log lines a stream, and
a reconnect storm opens dozens a turn) calls `per_turn(loop)`: its lines are then written
together once the turn's callbacks have run, one write for them all, rather than one write
and flush each; `flush` writes what waits (a process's last act).
"""

from __future__ import annotations

import os
import sys
import threading
import time

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


def setup(level: str) -> None:
    """The lowest level written (each process calls it once, at start)."""
    global _threshold
    _threshold = LEVELS[level]


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

    def _write(self, level: str, event: str, fields: dict) -> None:
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
        self._write("debug", event, fields)

    def info(self, event: str, **fields) -> None:
        self._write("info", event, fields)

    def warning(self, event: str, **fields) -> None:
        self._write("warning", event, fields)

    def error(self, event: str, **fields) -> None:
        self._write("error", event, fields)


def get(role: str) -> Logger:
    return Logger(role)
