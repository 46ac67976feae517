"""A py-spy profile in a few lines: the share of samples under each function (inclusive, each
stack counted once per function) and where they were spent (self), from py-spy's raw output
(`py-spy record -f raw`: one collapsed stack and its count a line), as loadtest/RESULTS.md
quotes them.

    python -m loadtest.spy_summary /tmp/worker.spy [--top 15] [--match hub.py]
"""

from __future__ import annotations

import argparse
import collections
import re

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::(?P<line>\d+))?\)$")


def short(frame: str) -> str:
    """`func (path/to/file.py:12)` as `func (file.py)`: lines differ between versions."""
    found = FRAME.match(frame)
    if not found:
        return frame
    return f"{found['func']} ({found['file'].rsplit('/', 1)[-1]})"


def summary(path: str, top: int, match: str | None) -> str:
    inclusive: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    total = 0
    with open(path) as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            samples = int(count)
            frames = [short(frame) for frame in stack.split(";")]
            total += samples
            for frame in set(frames):
                inclusive[frame] += samples
            own[frames[-1]] += samples
    lines = [f"{total} samples"]
    for title, counter in (("inclusive", inclusive), ("self", own)):
        lines.append(f"-- {title}")
        shown = [(frame, n) for frame, n in counter.most_common() if match is None or match in frame]
        lines += [f"{100 * n / max(1, total):5.1f}%  {frame}" for frame, n in shown[:top]]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("path")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--match", help="only frames whose text holds this")
    args = p.parse_args(argv)
    print(summary(args.path, args.top, args.match))


if __name__ == "__main__":
    main()
