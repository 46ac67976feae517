"""A named file in /dev/shm, mapped with mmap: the memory the ring and the counters live in.

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

SHM_DIR = "/dev/shm"


def _path(name: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"a segment name is a plain file name, not {name!r}")
    return os.path.join(SHM_DIR, name)


class Segment:
    def __init__(self, name: str, mapping: mmap.mmap) -> None:
        self.name = name
        self.size = len(mapping)
        self.buf = memoryview(mapping)
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
    def attach(cls, name: str) -> Segment:
        fd = os.open(_path(name), os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return cls(name, mapping)

    def view(self, start: int, stop: int, fmt: str = "Q") -> memoryview:
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

    def unlink(self) -> None:
        try:
            os.unlink(_path(self.name))
        except FileNotFoundError:
            pass
