"""Every rule the code, tests and docs cite is written in docs/guarantees.md's index."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: "rule 7", "rules 5-9", "rules 3 and 4", "rules 30, 31": every number such a phrase names.
CITATION = re.compile(r"\b[Rr]ules? (\d+(?:(?:, | and |-|\u2013| to )\d+)*)")


def _cited(text: str) -> set[int]:
    numbers: set[int] = set()
    for match in CITATION.finditer(text):
        for span in re.split(r", | and ", match.group(1)):
            ends = [int(n) for n in re.split(r"-|\u2013| to ", span)]
            numbers.update(range(ends[0], ends[-1] + 1))
    return numbers


def _indexed() -> set[int]:
    text = (ROOT / "docs" / "guarantees.md").read_text()
    index = text[text.index("## Every rule at a glance"):]
    index = index[:index.index("\n## ", 1)]
    return {int(n) for n in re.findall(r"^\| (\d+) \|", index, re.MULTILINE)}


def test_every_cited_rule_is_in_the_index() -> None:
    indexed = _indexed()
    missing = {}
    for folder, pattern in (("django_ultjobs", "*.py"), ("django_ultjobs", "*.sql"),
                            ("tests", "*.py"), ("docs", "*.md"), ("benchmarks", "*.py")):
        for path in (ROOT / folder).rglob(pattern):
            unknown = _cited(path.read_text()) - indexed
            if unknown:
                missing[str(path.relative_to(ROOT))] = sorted(unknown)
    assert missing == {}


def test_citations_are_read_whole() -> None:
    assert _cited("rules 5-7, rule 12 and rules 30, 31 and 40") == {5, 6, 7, 12, 30, 31, 40}
