"""Every relative link in README.md, SECURITY.md and docs/*.md names a file that exists, and
every figure capacity is planned with has one source.

Links carry no anchor: a section is named in words beside the link ("Capacity"), which no
renaming of a heading can break silently. Links with a scheme (https:, mailto:) are the web's,
not checked here; fenced code blocks are not prose and are skipped.

docs/benchmarks.md's "The figures other pages quote" holds each such figure once: a sentence of
any page that speaks of one of its quantities (memory per idle watcher, CPU per opening, the
processes' memory, ...) may give only that table's numbers for it, so a figure changed there and
not elsewhere, or quoted from an older run, fails here.
"""

from __future__ import annotations

import glob
import os
import re

import pytest

from helpers.doc_figures import numbers, quoted_figures
from helpers.gateway_harness import ROOT

DOCUMENTS = ["README.md", "SECURITY.md", *sorted(
    os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]*)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def relative_links(document: str) -> list[str]:
    with open(os.path.join(ROOT, document), encoding="utf-8") as fh:
        prose = FENCE.sub("", fh.read())
    return [target for target in LINK.findall(prose) if not SCHEME.match(target)]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_relative_link_names_an_existing_file_without_an_anchor(document):
    links = relative_links(document)
    anchored = [target for target in links if "#" in target]
    assert not anchored, f"{document}: name the section in words, not as an anchor: {anchored}"
    base = os.path.dirname(os.path.join(ROOT, document))
    missing = [target for target in links if not os.path.exists(os.path.join(base, target))]
    assert not missing, f"{document}: links to nothing: {missing}"


def test_the_front_door_links_every_document():
    """README.md reaches every page of docs/ (none is orphaned by the move out of it)."""
    linked = {os.path.normpath(target) for target in relative_links("README.md")}
    pages = {document for document in DOCUMENTS if document.startswith("docs" + os.sep)}
    assert pages <= linked, f"README.md does not link {sorted(pages - linked)}"


# (how a sentence speaks of a quantity, the unit its figure carries, the words naming the
# table's rows whose numbers it may give)
TOPICS = [
    (r"(?=.*\bidle\b)(?=.*\bwatchers?\b)(?=.*\b(?:RSS|PSS)\b)", "KiB", "worker memory (RSS) per idle"),
    (r"(?=.*\bidle\b)(?=.*\bwatchers?\b)", "KiB", "idle watcher"),
    (r"(?=.*\bwatchers?\b)(?=.*(?:events? a second|events/s|× 100\b))", "KiB", "per watcher under"),
    (r"\bopenings?\b", "µs", "opening"),
    (r"\bdeliver(?:y|ies)\b", "µs", "per delivery"),
    (r"\bprocess(?:es|\s+tree)\b", "MB", "processes"),
]
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(*`\[])")


def sentences(text: str, tables: bool = True) -> list[str]:
    """A page's prose, sentence by sentence (a table row is one); code blocks left out."""
    out = []
    for paragraph in re.split(r"\n\s*\n", FENCE.sub("", text)):
        lines = paragraph.strip().splitlines()
        if lines and lines[0].startswith("|"):
            out += lines if tables else []
            continue
        for item in re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", "\n".join(lines)):  # a list's items apart
            out += SENTENCE_END.split(" ".join(line.strip() for line in item.splitlines()))
    return out


def wrong_figures(text: str, tables: bool = True) -> list[str]:
    """Each sentence of `text` giving a number for a quoted quantity that the table does not."""
    figures = quoted_figures()
    wrong = []
    for sentence in sentences(text, tables):
        for topic, unit, rows in TOPICS:
            if not re.search(topic, sentence):
                continue
            allowed = {n for quantity, figure in figures.items() if rows in quantity for n in numbers(figure)}
            given = numbers(" ".join(re.findall(rf"(\d[\d,]*(?:\.\d+)?)\s*{unit}\b", sentence)))
            if set(given) - allowed:
                wrong.append(f"{sorted(set(given) - allowed)} {unit}: {sentence}")
    return wrong


def test_the_quoted_figures_are_a_table_of_every_topic():
    figures = quoted_figures()
    for _, unit, rows in TOPICS:
        assert any(rows in quantity and unit in figure for quantity, figure in figures.items()), rows


@pytest.mark.parametrize("text", [
    "Memory: 14.3 KiB per idle watcher (`loadtest/RESULTS.md`).",  # deploy.md, before
    "Plan memory at about 20 KiB per idle watcher (worker memory plus the kernel's).",  # operations.md
    "A watcher costs about 10 KiB of RSS idle at 10,000 (nchan 10.0).",  # benchmarks.md, run 7
    "An idle watcher costs about 14.5 KiB of worker memory (RSS and PSS).",  # sizing.md
    "CPU per opening: 180 µs.",
    "HTTP/2 costs 42 µs a delivery.",
])
def test_a_figure_other_than_the_table_s_is_caught(text):
    assert wrong_figures(text)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_page_quotes_the_one_source_s_figures(document):
    with open(os.path.join(ROOT, document), encoding="utf-8") as fh:
        text = fh.read()
    # benchmarks.md's own tables hold other servers' figures and the runs' other rows
    wrong = wrong_figures(text, tables=document != os.path.join("docs", "benchmarks.md"))
    assert not wrong, f"{document}: " + "\n".join(wrong)
