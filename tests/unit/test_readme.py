"""The README's documentation list names every page of docs/, each once."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_lists_every_docs_page_once() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Documentation"):]
    # The list: its items and their continuation lines, up to the first line that is neither.
    items = re.match(r"## Documentation\n\n((?:(?:- |  ).*\n)+)", section)
    assert items is not None
    listed = Counter(re.findall(r"\]\(docs/([\w-]+\.md)\)", items.group(1)))
    assert [page for page, n in listed.items() if n > 1] == []
    assert set(listed) == {page.name for page in (ROOT / "docs").glob("*.md")}
