"""Every relative link in README.md, SECURITY.md and docs/*.md names a file that exists.

Links carry no anchor: a section is named in words beside the link ("Capacity"), which no
renaming of a heading can break silently. Links with a scheme (https:, mailto:) are the web's,
not checked here; fenced code blocks are not prose and are skipped.
"""

from __future__ import annotations

import glob
import os
import re

import pytest

from gateway_harness import ROOT

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
