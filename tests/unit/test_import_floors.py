"""The import graph docs/architecture.md draws, kept: the source tree's floors, no circle, and
loadtest/ reaching the gateway through gateway/bench_surface.py only, and modules of at most
400 lines in both.

Read from the source (every `import` the code runs, at import or inside a function; those
under `if TYPE_CHECKING:` run never and are left out). An import goes down the floors or
across to what every floor shares (`logs`, `tuning`, the package's own `version`), never up
and never sideways between two processes' folders: the worker and the sequencer meet only in
common/. A circle makes the order of imports matter; an arrow up makes a lower floor depend on
what it serves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# Highest first: a module may import a lower floor's, never a higher one's, nor a sibling
# process's (floors of equal height).
FLOORS = {"gateway.commands": 0, "gateway.supervisor": 1, "gateway.sequencer": 2, "gateway.worker": 2,
          "gateway.watch": 2, "gateway.config": 3, "gateway.common": 4, "gateway.protocol": 5, "shm": 6}
SHARED = {"gateway", "gateway.logs", "gateway.tuning"}
SURFACE = "gateway.bench_surface"


def modules() -> dict[str, Path]:
    found = {}
    for top in ("gateway", "shm", "loadtest"):
        for path in (ROOT / top).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _run_time(node: ast.AST):
    """The import statements under `node` that run (not those under `if TYPE_CHECKING:`)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _run_time(child)


def graph() -> dict[str, set[str]]:
    """module -> the modules of this tree it imports (a package's parents, which Python runs
    first anyway, left out)."""
    known = modules()

    def known_of(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in _run_time(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
                continue
            base = node.module or ""
            if node.level:  # relative: from the package, one level up for each dot past the first
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets |= {f"{base}.{alias.name}" for alias in node.names} | {base}
        edges[name] = {t for t in map(known_of, targets)
                       if t is not None and t != name and not name.startswith(t + ".")}
    return edges


def floor_of(name: str) -> tuple[str, int] | None:
    return next(((top, height) for top, height in FLOORS.items()
                 if name == top or name.startswith(top + ".")), None)


def test_no_import_goes_up_a_floor_or_across_to_another_process():
    wrong = []
    for name, targets in graph().items():
        here = floor_of(name)
        if name.startswith("loadtest") or name == SURFACE:
            continue
        for target in targets:
            there = floor_of(target)
            if target == SURFACE or target.startswith("loadtest"):
                wrong.append(f"{name} -> {target}")  # what measures the gateway is no part of it
            elif here is not None and there is not None and (
                    there[1] < here[1] or (there[1] == here[1] and there[0] != here[0])):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_the_shared_modules_import_no_floor():
    edges = graph()
    assert {name: edges[name] - SHARED for name in SHARED - {"gateway"} if edges[name] - SHARED} == {}


def test_no_import_circle():
    edges = graph()
    circles, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circles.append(path[path.index(name):] + [name])
            return
        if name in done:
            return
        for target in sorted(edges.get(name, ())):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(edges):
        visit(name, [])
    assert circles == []


def test_loadtest_reaches_the_gateway_through_its_surface_only():
    reached = {f"{name} -> {target}" for name, targets in graph().items() if name.startswith("loadtest")
               for target in targets if target.startswith("gateway") and target != SURFACE}
    assert reached == set()


@pytest.mark.parametrize("tree", ["gateway", "loadtest"])
def test_no_module_is_over_400_lines(tree):
    long = {str(path.relative_to(ROOT)): lines for path in (ROOT / tree).rglob("*.py")
            if (lines := path.read_text(encoding="utf-8").count("\n")) > 400}
    assert long == {}
