"""gateway/worker/malloc_trim.py: the worker's free heap is trimmed again and again, on glibc."""

from __future__ import annotations

import asyncio
import platform

import pytest

from gateway.worker.malloc_trim import Trimmer

pytestmark = pytest.mark.unit


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_trimmer_trims_on_its_timer_until_cancelled():
    async def run() -> list[int]:
        trimmer, calls = Trimmer(interval=0.001), []
        real = trimmer.trim
        trimmer.trim = lambda pad: calls.append(real(pad))
        trimmer.start()
        while len(calls) < 3:
            await asyncio.sleep(0.001)
        trimmer.cancel()
        seen = len(calls)
        await asyncio.sleep(0.01)
        return [seen, len(calls), trimmer.timer]
    seen, after, timer = asyncio.run(asyncio.wait_for(run(), 30))
    assert seen >= 3 and after == seen and timer is None
