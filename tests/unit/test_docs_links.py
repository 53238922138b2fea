"""Every relative link of the docs reaches a file of the repository, its anchor a heading there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose links are followed: the README, the docs and the benchmarks' README.
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]
#: An inline link or image, ``[text](target)`` or ``[text](target "title")``.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered), and any ``<a id="...">`` the page sets itself."""
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        n, unique = 0, slug
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found | set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))


def broken(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            bad.append(target)
    return bad


def test_every_relative_link_and_anchor_resolves() -> None:
    found = {page.relative_to(ROOT).as_posix(): bad for page in PAGES
             if page.exists() and (bad := broken(page))}
    assert found == {}


def test_anchors_are_read_as_github_makes_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Fleet-wide concurrency (5\u201310)\n## `--threads`: why\n## Logs\n"
                    "## Logs\n```\n# not a heading\n```\n[a](#logs-1) [b](#nope) [c](other.md)\n")
    assert anchors(page) == {"fleet-wide-concurrency-510", "--threads-why", "logs", "logs-1"}
    assert broken(page) == ["#nope", "other.md"]
