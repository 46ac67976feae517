"""gateway/worker/hypercorn/: the one package that knows hypercorn. These fail, naming what
moved, when a hypercorn (or h11, h2, uvloop) release changes an internal the adapter follows;
the adapter itself then stops offering what it cannot bound (HTTP/2), which is checked here
too, and tests/e2e/test_fallback.py checks live. hypercorn serves HTTP/2 only: the table holds no
HTTP/1.1 row.

`prepare` patches the process it runs in, so every test that calls it runs it in a child
Python: this pytest process keeps hypercorn as released."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from gateway.worker.asgi_sink import AsgiSink
from gateway.worker.http.cycle import scope_of
from gateway.worker.http.front import Front
from gateway.worker.hypercorn import patches, serving
from helpers.gateway_harness import ROOT

ADAPTER = pathlib.Path(ROOT, "gateway", "worker", "hypercorn")
# The upstream link's HTTP client (in the sequencer, not the worker) uses h11's public API.
H11_CLIENT = pathlib.Path(ROOT, "gateway", "sequencer", "capsule", "upstream_http.py")


def in_child(code: str) -> str:
    """Run `code` in a fresh Python (the patches land there, not here); its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_internals_the_adapter_follows_are_where_it_expects():
    problem = serving.internals_problem()
    assert problem is None, f"{problem}: update gateway/worker/hypercorn/ (patches.py's table) for it"


def test_prepare_installs_every_replacement_in_the_table():
    out = in_child("""
        from gateway.worker.hypercorn import patches, serving
        assert serving.prepare() is serving.sink_for
        for row in patches.TABLE:
            if row.replacement is not None:
                assert getattr(patches.resolve(row.owner), row.name) is patches.resolve(row.replacement), row
        print(sum(row.replacement is not None for row in patches.TABLE))
    """)
    assert int(out) == 9  # StreamBuffer.pop, H2Protocol._close_stream; h2_limits.py's 3; h2_idle.py's 4


def test_the_table_holds_hypercorns_http2_rows_and_accepts_alone():
    """43 rows: 39 before the front served every HTTP/1.1 request (19 were HTTP/1.1's), 6 since
    for HTTP/2 input that raised out of hypercorn, 14 for HTTP/2 connections with no stream
    and hypercorn's closes (h2_idle.py), 3 for handing it single HTTP/2 connections (serving.H2:
    its TCPServer, WorkerContext and app wrapper) when the worker's own server took the socket."""
    assert len(patches.TABLE) == 43
    assert all(row.guarantee in (patches.H2, None) for row in patches.TABLE)
    assert not any("h11" in row.owner for row in patches.TABLE)


def test_this_process_is_not_patched():
    from hypercorn.protocol.h2 import StreamBuffer
    assert StreamBuffer.pop.__module__ == "hypercorn.protocol.h2"


def test_every_row_but_accepts_rests_on_a_guarantee():
    """A row no guarantee rests on has no fallback to check it for: http/accept.py's alone,
    which the first test here checks."""
    assert [(row.owner, row.name) for row in patches.TABLE if row.guarantee is None] == [
        ("socket:socket", "_accept"), ("uvloop:Loop", "connect_accepted_socket")]


def test_a_stream_hypercorn_serves_gets_the_asgi_sink_and_the_fronts_is_the_front():
    """The front hands itself over in the scope it makes (cycle.scope_of); hypercorn's scope
    holds no sink, so its streams get the ASGI sink."""
    async def send(message):
        pass

    async def receive():
        return {"type": "http.disconnect"}
    served = Front.__new__(Front)
    request = SimpleNamespace(url=b"/", version=b"1.1", headers=[], method=b"POST")
    transport = SimpleNamespace(get_extra_info=lambda name: None)
    assert serving.sink_for(scope_of(request, transport, "http", False, None, served), send, receive) is served
    assert type(serving.sink_for({"type": "http", "extensions": {}}, send, receive)) is AsgiSink


def test_a_guarantee_whose_rows_moved_is_not_offered_and_the_rest_installs():
    out = in_child("""
        from gateway.worker.hypercorn import patches, serving
        from hypercorn.protocol.h2 import StreamBuffer
        before = StreamBuffer.pop
        patches.GUARANTEES[patches.H2] = (*patches.GUARANTEES[patches.H2],
                                          patches.Row("hypercorn.protocol.h2:Nowhere", "pop", None, "hypercorn"))
        assert serving.prepare() is serving.sink_for
        assert StreamBuffer.pop is before
        print(serving._missing[patches.H2])
    """)
    assert out.strip() == "internals moved: hypercorn: hypercorn.protocol.h2:Nowhere.pop"


def test_the_test_switch_reports_every_group_moved_and_nothing_is_patched():
    out = in_child("""
        import os
        os.environ["MURGW_TEST_INTERNALS_MOVED"] = "1"
        from gateway.worker.hypercorn import patches, serving
        from hypercorn.protocol.h2 import StreamBuffer
        assert serving.prepare() is serving.sink_for
        assert StreamBuffer.pop.__module__ == "hypercorn.protocol.h2"
        print(sorted(serving._missing))
    """)
    assert out.strip() == "['h2']"


def test_every_replacement_in_the_adapter_is_a_row():
    """No module of the adapter assigns to an imported module's or class's attribute, nor calls
    setattr: patches.py's `install` alone replaces another library's attributes."""
    for path in ADAPTER.glob("*.py"):
        if path.name == "patches.py":
            continue
        tree = ast.parse(path.read_text())
        imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr"), path.name
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                root = target
                while isinstance(root, ast.Attribute):
                    root = root.value
                assert not (target is not root and isinstance(root, ast.Name) and root.id in imported), \
                    f"{path.name}:{node.lineno}: an imported object's attribute replaced outside patches.py"


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_module_outside_the_adapter_imports_hypercorn():
    for path in pathlib.Path(ROOT, "gateway").rglob("*.py"):
        if ADAPTER in path.parents:
            continue
        roots = {name.split(".")[0] for name in imported_modules(path)}
        assert "hypercorn" not in roots, path
        if path != H11_CLIENT:
            assert "h11" not in roots, path
    assert not any(name.startswith("h11._") for name in imported_modules(H11_CLIENT))
