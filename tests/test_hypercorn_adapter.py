"""gateway/worker/hypercorn/: the one package that knows hypercorn. These fail, naming what
moved, when a hypercorn (or h11) release changes an internal the adapter follows; the adapter
itself then falls back to plain ASGI sends (slower, still correct), which is checked here
too. tests/test_direct_body.py and tests/test_lean.py check the same internals live."""

from __future__ import annotations

import ast
import pathlib

from gateway.worker.hypercorn import serving
from gateway.worker.hypercorn.asgi import AsgiSink
from gateway.worker.hypercorn.direct import sink_for
from support import ROOT

ADAPTER = pathlib.Path(ROOT, "gateway", "worker", "hypercorn")
# The upstream link's HTTP client (in the sequencer, not the worker) uses h11's public API.
H11_CLIENT = pathlib.Path(ROOT, "gateway", "capsule", "upstream_http.py")


def test_the_internals_the_adapter_follows_are_where_it_expects():
    problem = serving.internals_problem()
    assert problem is None, f"{problem}: update gateway/worker/hypercorn/ (direct.py, lean.py) for it"


def test_on_a_hypercorn_it_does_not_know_streams_use_plain_asgi(monkeypatch):
    assert serving.prepare() is sink_for
    monkeypatch.setattr(serving.metadata, "version", lambda name: "99.0")
    assert "hypercorn 99.0" in serving.internals_problem()
    assert serving.prepare() is AsgiSink


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
