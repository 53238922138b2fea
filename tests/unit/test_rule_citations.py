"""Every rule the code, tests and docs cite is cited by number and name, as the rulebook writes it.

A citation reads ``rule 4 (fenced-settle)``, so a reader never looks a number up; the number stays
because it is stable and easy to grep. The rules are the tables of docs/guarantees.md (what users
rely on) and of docs/architecture.md's internal rules; every rule in them has a name, kebab-case,
used by no other rule, and a number written in one place only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The tables that number and name the rules: (page, the heading of the table's section).
RULEBOOKS = (("docs/guarantees.md", "## Every rule at a glance"),
             ("docs/architecture.md", "## Internal rules"))
#: Where citations are read: (folder or file, file pattern).
CITING = (("django_ultjobs", "*.py"), ("django_ultjobs", "*.sql"), ("django_ultjobs", "*.html"),
          ("tests", "*.py"), ("benchmarks", "*.py"), ("docs", "*.md"), ("example_project", "*.py"),
          (".", "README.md"))
NAME = r"[a-z0-9]+(?:-[a-z0-9]+)*"
#: Between two numbers of one citation ("rules 3 (a) and 4 (b)", "rules 5 (a) to 9 (b)"), a line
#: break and a comment's marker allowed.
JOIN = r"(?:,|,? and| or| to)\s+(?:(?:#:?|--)\s+)?"
#: "rule 4 (fenced-settle)", "rules 3 (a) and 4 (b)", "rules 5 (a) to 9 (b)".
NAMED = re.compile(rf"\b[Rr]ules? (\d+ \({NAME}\)(?:{JOIN}\d+ \({NAME}\))*)")
#: A number cited without its name: "rule 7", "rules 5-9", or one more number after a named one.
UNNAMED = rf"\d+(?!\d| \({NAME}\))"
BARE = re.compile(rf"\b[Rr]ules? {UNNAMED}"
                  rf"|\b[Rr]ules? \d+ \({NAME}\)(?:{JOIN}\d+ \({NAME}\))*{JOIN}{UNNAMED}")
#: Every number a bare phrase names: "rule 7", "rules 5-9", "rules 3 and 4", "rules 30, 31".
NUMBERS = re.compile(r"\b[Rr]ules? (\d+(?:(?:, | and |-|\u2013| to )\d+)*)")


def _rulebook() -> list[tuple[int, str]]:
    rows = []
    for page, heading in RULEBOOKS:
        text = (ROOT / page).read_text()
        section = text[text.index(f"{heading}\n"):]
        end = section.find("\n#", 1)
        section = section if end < 0 else section[:end]
        rows += [(int(n), name)
                 for n, name in re.findall(r"^\| (\d+) \| ([^|]*?) \|", section, re.M)]
    return rows


def _citing() -> Iterator[tuple[str, str]]:
    """Every file that may cite a rule, but this one (its samples are no citations)."""
    for folder, pattern in CITING:
        for path in sorted((ROOT / folder).rglob(pattern) if folder != "." else [ROOT / pattern]):
            if ".venv" not in path.parts and path != Path(__file__):
                yield path.relative_to(ROOT).as_posix(), path.read_text()


def _named(text: str) -> list[tuple[int, str]]:
    return [(int(n), name) for match in NAMED.finditer(text)
            for n, name in re.findall(rf"(\d+) \(({NAME})\)", match.group(1))]


def _bare(path: str, text: str) -> list[str]:
    if path.endswith(".md"):  # a heading names the rules its section writes, and keeps its anchor
        text = re.sub(r"^#.*$", "", text, flags=re.M)
    return [match.group(0) for match in BARE.finditer(text)]


def _numbers(text: str) -> set[int]:
    numbers: set[int] = set()
    for match in NUMBERS.finditer(text):
        for span in re.split(r", | and ", match.group(1)):
            ends = [int(n) for n in re.split(r"-|\u2013| to ", span)]
            numbers.update(range(ends[0], ends[-1] + 1))
    return numbers


def test_every_rule_has_one_name_of_its_own() -> None:
    rows = _rulebook()
    assert len(rows) > 70
    assert [name for _, name in rows if not re.fullmatch(NAME, name)] == []
    numbers = [n for n, _ in rows]
    names = [name for _, name in rows]
    assert sorted({n for n in numbers if numbers.count(n) > 1}) == []
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_named_citation_matches_the_rulebook() -> None:
    rules = dict(_rulebook())
    wrong = {}
    for path, text in _citing():
        bad = [f"rule {n} ({name})" + (f", not ({rules[n]})" if n in rules else ", no such rule")
               for n, name in _named(text) if rules.get(n) != name]
        if bad:
            wrong[path] = bad
    assert wrong == {}


def test_no_rule_is_cited_by_its_number_alone() -> None:
    bare = {path: found for path, text in _citing()
            if (found := _bare(path, text))}
    assert bare == {}


def test_user_pages_say_what_holds_in_words() -> None:
    # A user reads what holds, not a number to look up: only the rulebook and the maintainer's
    # page cite rules; the other pages link the rulebook's section instead.
    rulebooks = {Path(page).name for page, _ in RULEBOOKS}
    cited = {page.name: NUMBERS.findall(page.read_text()) for page in (ROOT / "docs").glob("*.md")
             if page.name not in rulebooks}
    assert {name: found for name, found in cited.items() if found} == {}


def test_every_number_cited_is_a_rule() -> None:
    rules = dict(_rulebook())
    unknown = {path: sorted(found) for path, text in _citing()
               if (found := _numbers(text) - set(rules))}
    assert unknown == {}


def test_citations_are_read_whole() -> None:
    text = ("rules 5 (fleet-cap) to 7 (slot-fenced), rule 12 (parked) and rules 30 (a),\n"
            "    # 31 (b) or 40 (c)")
    assert _named(text) == [(5, "fleet-cap"), (7, "slot-fenced"), (12, "parked"), (30, "a"),
                            (31, "b"), (40, "c")]
    assert _bare("x.py", text) == []
    assert _bare("x.py", "rule 7, rules 3 (a) and 4; rules 5-9") == ["rule 7",
                                                                     "rules 3 (a) and 4", "rules 5"]
    assert _bare("x.py", "rule 101 (performance.md, item 94)") == ["rule 101"]
    assert _bare("x.py", "SQLSTATE classes 08 (connection), 53 (disk full)") == []
    assert _bare("x.md", "## Caps (rules 5-9)\nrule 12 (parked)") == []
    assert _numbers("rules 5-7, rule 12 and rules 30, 31 and 40") == {5, 6, 7, 12, 30, 31, 40}
