"""The guides a user follows hold together: every relative link in README.md and docs/ reaches a file, and a
``#anchor`` a heading of it (GitHub's slugs); every repository path the docs name in backticks exists; README's tour
of the commands names every command the command line has.

Plain text reading, no network: a link that leaves the repository (http, https, mailto) is not followed.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "DESIGN.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCS = list(dict.fromkeys(DOCS))  # DESIGN.md is under docs/ too: each file once

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
# A path inside the repository, written in backticks: it must exist (a module moved without its docs fails here).
# (datasets/ holds users' folders in the examples; a part in capitals, such as configs/NAME.yaml, is a placeholder.)
REPO_PATH = re.compile(r"^(xtts_ft|tests|benchmarks|utils|configs|docs)/[\w./-]*$")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]*(\.|/|$)")
# A test file named as the docs cite them, relative to tests/ ([`train/test_resume.py`]).
TEST_FILE = re.compile(r"^([\w-]+/)*test_\w+\.py$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LNM":
            kept.append("-" if ch == " " else ch)
    return "".join(kept)


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in ``path``; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside code (code spans and fenced blocks)."""
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            found.append((number, match.group(1)))
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: leave the repository
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        if anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            problems.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    return problems


def missing_paths(path: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in CODE_SPAN.finditer(line):
            name = match.group(2).strip().rstrip(".,:;")
            if REPO_PATH.match(name) and not PLACEHOLDER.search(name):
                exists = (ROOT / name).exists()
            elif TEST_FILE.match(name):
                exists = (ROOT / "tests" / name).exists() or ("/" not in name and any((ROOT / "tests").rglob(name)))
            else:
                continue
            if not exists:
                problems.append(f"{path.relative_to(ROOT)}:{number}: `{name}` does not exist")
    return problems


def test_the_readme_tours_every_command_the_cli_lists():
    from xtts_ft.cli import COMMANDS  # the table --help is printed from (no torch)

    rows = {match.group(1) for match in re.finditer(r"(?m)^\| `([\w-]+)` \|", (ROOT / "README.md").read_text(encoding="utf-8"))}
    assert sorted(set(COMMANDS) - rows) == [], "README.md's table of commands lacks these commands"
    assert sorted(rows - set(COMMANDS)) == [], "README.md's table of commands names commands the CLI does not have"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(doc: Path):
    assert broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_in_backticks_exists(doc: Path):
    assert missing_paths(doc) == []


def test_slugs_are_githubs():
    assert slug("What happens when...") == "what-happens-when"
    assert slug("Stop at the best: early stopping, the overfitting warning, epochs") == (
        "stop-at-the-best-early-stopping-the-overfitting-warning-epochs")
    assert slug("Keeping what the base model knew: `training.trainable`") == (
        "keeping-what-the-base-model-knew-trainingtrainable")
    assert slug("The [web app](webapp.md) & its tabs") == "the-web-app--its-tabs"
    assert slug("ሰላም 2") == "ሰላም-2"


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    doc = tmp_path / "guide.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n\n## A part\n", encoding="utf-8")
    doc.write_text("# Guide\n[ok](other.md#a-part) [twice](other.md#a-part-1) [here](#guide)\n"
                   "[gone](missing.md) [no anchor](other.md#nothing)\n"
                   "`[in code](missing.md)`\n```\n[fenced](missing.md)\n```\n[web](https://example.org/x)\n",
                   encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert broken_links(doc) == ["guide.md:3: missing.md: no such file",
                                 "guide.md:3: other.md#nothing: no heading with that anchor in other.md"]
