"""Shared memory mapped with mmap: the memory the ring and the counters live in.

Two kinds. A *named* segment is a file in /dev/shm (tests and benchmarks attach to it by
name; ``unlink`` removes it). An *anonymous* segment (``create_anonymous``) is a memfd: it
has no path at all, lives exactly as long as some process maps it or holds its fd, and so
cannot outlive its processes whatever kills them, SIGKILL of every process included. Its
``handle`` is how another process attaches: a ``Handle`` pickles, for a multiprocessing
spawn child, as the fd itself passed to the child (the way multiprocessing passes sockets),
and ``attach(handle)`` maps it and closes the child's copy of the fd.

Not ``multiprocessing.shared_memory``: on Python 3.11 every process that attaches registers
the segment with its resource tracker, which may unlink it when that process exits
(cpython #82300). A plain file is created exclusively by its owner and goes away only when
someone calls ``unlink``.

``close`` releases every view handed out by ``view`` and then ``buf`` before unmapping, so
nothing in this process can touch the memory afterwards (a released view raises
``ValueError``). A view sliced from those by the caller must be released by the caller,
or ``close`` raises ``BufferError``.
"""

from __future__ import annotations

import mmap
import os
from multiprocessing import reduction
from typing import Any, Literal

SHM_DIR = "/dev/shm"


def _path(name: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"a segment name is a plain file name, not {name!r}")
    return os.path.join(SHM_DIR, name)


class Handle:
    """An anonymous segment's name (for messages) and fd, picklable only into a spawned
    child (``reduction.DupFd`` adds the fd to the ones the child inherits)."""

    def __init__(self, name: str, fd: int) -> None:
        self.name, self.fd = name, fd

    def __reduce__(self) -> tuple[object, tuple[str, object]]:
        return _rebuild_handle, (self.name, reduction.DupFd(self.fd))


def _rebuild_handle(name: str, dup: Any) -> Handle:  # dup: what reduction.DupFd made (typeshed: Any)
    return Handle(name, dup.detach())


class Segment:
    def __init__(self, name: str, mapping: mmap.mmap, handle: Handle | None = None, *,
                 anonymous: bool = False) -> None:
        self.name = name
        self.anonymous = anonymous or handle is not None
        self.size = len(mapping)
        self.buf = memoryview(mapping)
        self.handle = handle  # set on the creator's side of an anonymous segment
        self._mapping: mmap.mmap | None = mapping
        self._views: list[memoryview] = []

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        """A new zero-filled segment; ``FileExistsError`` if the name is taken."""
        path = _path(name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(name, mapping)

    @classmethod
    def create_anonymous(cls, name: str, size: int) -> Segment:
        """A new zero-filled memfd segment; its fd stays open in ``handle`` until ``close``."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(name, mapping, Handle(name, fd))

    @classmethod
    def attach(cls, where: str | Handle) -> Segment:
        """Map a named segment, or an anonymous one by its handle (whose fd this closes)."""
        if isinstance(where, Handle):
            name, fd = where.name, where.fd
        else:
            name, fd = where, os.open(_path(where), os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return cls(name, mapping, anonymous=isinstance(where, Handle))

    def view(self, start: int, stop: int, fmt: Literal["Q", "B"] = "Q") -> memoryview:
        """``buf[start:stop]`` cast to ``fmt``, released by ``close``."""
        view = self.buf[start:stop].cast(fmt)
        self._views.append(view)
        return view

    def close(self) -> None:
        if self._mapping is None:
            return
        for view in self._views:
            view.release()
        self._views.clear()
        self.buf.release()
        self._mapping.close()
        self._mapping = None
        if self.handle is not None:
            os.close(self.handle.fd)
            self.handle = None

    def unlink(self) -> None:
        """Remove a named segment's file (an anonymous one has none)."""
        if self.anonymous:
            return
        try:
            os.unlink(_path(self.name))
        except FileNotFoundError:
            pass
