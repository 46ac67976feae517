"""The gateway loadtest/memparts.py measures: one worker that dumps itself on request.

A `sitecustomize` on PYTHONPATH (written to a temporary folder, active only where MEMPARTS_DIR
is set) starts a thread in every gateway process that, when a trigger file appears, writes
the census of gc-tracked objects and the memory figures and, if tracing, a tracemalloc
snapshot, in the worker process only (the one with a multiprocessing parent). `TracedGateway`
starts such a gateway (`--workers 1`) and asks it for a dump.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import orjson

from loadtest.servers import free_port, stop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SITECUSTOMIZE = r'''
import os, sys, threading, time

def _memparts_dump(folder, n):
    import gc, json, multiprocessing, tracemalloc
    # the worker: a spawned child serving with hypercorn (the supervisor imports the
    # worker's module too, to name the spawn target, but serves nothing)
    if multiprocessing.parent_process() is None or "hypercorn.asyncio.run" not in sys.modules:
        return False
    gc.collect()
    census = {}
    for obj in gc.get_objects():
        kind = type(obj)
        key = "%s.%s" % (kind.__module__, kind.__qualname__)
        if kind.__name__ == "coroutine":  # which frames a stream keeps suspended
            key += " " + str(getattr(obj, "__qualname__", "?"))
        entry = census.setdefault(key, [0, 0])
        entry[0] += 1
        try:
            entry[1] += sys.getsizeof(obj)
        except Exception:
            pass
    memory = {}
    for name in ("/proc/self/status", "/proc/self/smaps_rollup"):
        with open(name) as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    memory[key] = int(rest.split()[0])
    try:  # glibc's heap: what malloc holds, in use and free (free: fragmentation, a high-water mark)
        import ctypes
        class Info(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                "keepcost")]
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Info
        info = libc.mallinfo2()
        memory["malloc_in_use"] = (info.uordblks + info.hblkhd) // 1024
        memory["malloc_free"] = info.fordblks // 1024
    except (OSError, AttributeError):
        pass
    base = os.path.join(folder, "%d-%d" % (os.getpid(), n))
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(base + ".snap")
    with open(base + ".json", "w") as fh:
        json.dump({"census": census, "memory": memory}, fh)
    os.rename(base + ".json", base + ".done")
    return True

def _memparts_watch(folder):
    seen = set()
    while True:
        for name in os.listdir(folder):
            if name.startswith("dump-") and name not in seen:
                try:
                    if _memparts_dump(folder, int(name[5:])):
                        seen.add(name)
                except Exception:
                    import traceback
                    seen.add(name)
                    with open(os.path.join(folder, "error-%d" % os.getpid()), "w") as fh:
                        fh.write(traceback.format_exc())
        time.sleep(0.05)

if os.environ.get("MEMPARTS_DIR"):
    threading.Thread(target=_memparts_watch, args=(os.environ["MEMPARTS_DIR"],), daemon=True).start()
'''

class TracedGateway:
    def __init__(self, args, rate: float, watchers: int, trace: bool):
        self.folder = tempfile.mkdtemp(prefix="memparts-")
        with open(os.path.join(self.folder, "sitecustomize.py"), "w") as fh:
            fh.write(SITECUSTOMIZE)
        self.dumps = os.path.join(self.folder, "dumps")
        os.mkdir(self.dumps)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ, "MEMPARTS_DIR": self.dumps,
               "PYTHONPATH": os.pathsep.join([self.folder, ROOT, os.environ.get("PYTHONPATH", "")])}
        if trace:
            env["PYTHONTRACEMALLOC"] = str(args.frames)
        cmd = [sys.executable, "-m", "gateway", "--bind", f"127.0.0.1:{self.port}", "--workers", "1",
               "--metrics-bind", "off", "--log-level", "warning", "--heartbeat-interval", "30",
               "--max-connections", str(watchers + 64)]
        if rate:
            cmd += ["--sim-load", str(rate), "--sim-load-size", str(args.size)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.count = 0

    def dump(self, timeout: float = 120.0) -> tuple[dict, str | None]:
        """The worker's census and memory now, and its tracemalloc snapshot's path if tracing."""
        self.count += 1
        open(os.path.join(self.dumps, f"dump-{self.count}"), "w").close()
        deadline = time.monotonic() + timeout
        suffix = f"-{self.count}.done"
        while time.monotonic() < deadline:
            done = [name for name in os.listdir(self.dumps) if name.endswith(suffix)]
            if len(done) > 1:
                raise RuntimeError(f"more than one process dumped itself: {done}")
            if done:
                base = os.path.join(self.dumps, done[0][:-len(".done")])
                with open(base + ".done", "rb") as fh:
                    found = orjson.loads(fh.read())
                return found, base + ".snap" if os.path.exists(base + ".snap") else None
            errors = [name for name in os.listdir(self.dumps) if name.startswith("error-")]
            if errors:
                with open(os.path.join(self.dumps, errors[0])) as fh:
                    raise RuntimeError("the worker's dump failed: " + fh.read())
            time.sleep(0.05)
        raise TimeoutError("the worker did not dump itself in time")

    def close(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.folder, ignore_errors=True)
