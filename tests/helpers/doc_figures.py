"""docs/benchmarks.md's "The figures other pages quote": the one source of each figure that
capacity is planned with (the docs' check in tests/e2e/test_docs_links.py, the manifests' sizing
in tests/e2e/test_deploy_manifests.py)."""

from __future__ import annotations

import os
import re

from helpers.gateway_harness import ROOT

BENCHMARKS = os.path.join(ROOT, "docs", "benchmarks.md")
HEADING = "### The figures other pages quote"
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
UNITS = {"KiB": 1 << 10, "MB": 10**6}


def quoted_figures() -> dict[str, str]:
    """quantity -> figure, as the table writes them."""
    with open(BENCHMARKS, encoding="utf-8") as fh:
        section = fh.read().split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return {quantity: figure for quantity, figure, _ in rows[1:]}


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(text)]


def figure_bytes(quantity: str) -> float:
    """A memory figure (its first number and unit) in bytes."""
    figure = quoted_figures()[quantity]
    number, unit = re.search(rf"({NUMBER.pattern})\s*({'|'.join(UNITS)})\b", figure).groups()
    return float(number.replace(",", "")) * UNITS[unit]
