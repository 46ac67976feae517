"""SECURITY.md's promises and the tests that prove them, kept in step.

Each promise in SECURITY.md ends with a tag, `[claim: NAME]`; the test that proves it names
the same tag in its docstring. This fails when a tag of SECURITY.md has no test naming it,
when a test names a tag SECURITY.md does not have (a promise reworded or dropped without its
test), or when SECURITY.md gives one tag to two promises.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TAG = re.compile(r"\[claim: ([a-z0-9-]+)\]")


def promised() -> Counter:
    """Each tag of SECURITY.md, with how many times it is written there."""
    return Counter(TAG.findall((ROOT / "SECURITY.md").read_text()))


def named_by_tests() -> dict[str, list[str]]:
    """tag -> the tests (file::function) whose docstring names it."""
    named: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").glob("*/test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                for tag in TAG.findall(ast.get_docstring(node) or ""):
                    named.setdefault(tag, []).append(f"{path.name}::{node.name}")
    return named


def test_every_security_claim_has_a_test_that_names_it():
    missing = sorted(set(promised()) - set(named_by_tests()))
    assert not missing, f"SECURITY.md promises these with no test naming them: {missing}"


def test_every_claim_a_test_names_is_in_security_md():
    unknown = {tag: tests for tag, tests in named_by_tests().items() if tag not in promised()}
    assert not unknown, f"tests name claims SECURITY.md does not make: {unknown}"


def test_each_claim_is_tagged_once():
    twice = sorted(tag for tag, count in promised().items() if count > 1)
    assert not twice, f"SECURITY.md gives these tags to more than one promise: {twice}"
