"""Logs: one JSON object a line on stderr, from every process, naming its role and pid.

`get(role).warning("event text", key=value)` writes
``{"ts": …, "level": "warning", "role": …, "pid": …, "event": "event text", "key": value}``.
Nothing a client sends as a secret (tokens) is ever passed here.
"""

from __future__ import annotations

import os
import sys
import time

import orjson

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_threshold = LEVELS["info"]


def setup(level: str) -> None:
    """The lowest level written (each process calls it once, at start)."""
    global _threshold
    _threshold = LEVELS[level]


class Logger:
    def __init__(self, role: str):
        self.role = role

    def _write(self, level: str, event: str, fields: dict) -> None:
        if LEVELS[level] < _threshold:
            return
        record = {"ts": round(time.time(), 3), "level": level, "role": self.role,
                  "pid": os.getpid(), "event": event, **fields}
        try:
            sys.stderr.buffer.write(orjson.dumps(record, default=str) + b"\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must not take a server process down

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
