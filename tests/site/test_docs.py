"""The README is a front page (docs/README.md indexes the rest) and the documents hold together:
every relative link in README.md and docs/ reaches a file, and every `#anchor` a heading of it
by GitHub's rule. Parsed with markdown-it-py, so code blocks and code spans hold no links."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
MARKDOWN = MarkdownIt("commonmark").enable("table")
HTML_TARGET = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")


def inline_tokens(path: Path) -> list[Token]:
    found: list[Token] = []
    for token in MARKDOWN.parse(path.read_text()):
        found.append(token)
        found.extend(token.children or [])
    return found


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, each space a hyphen."""
    kept = "".join(ch for ch in text.lower() if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor, a repeated one suffixed -1, -2… as GitHub numbers them."""
    tokens = MARKDOWN.parse(path.read_text())
    seen: dict[str, int] = {}
    result: set[str] = set()
    for opening, inline in zip(tokens, tokens[1:], strict=False):
        if opening.type != "heading_open":
            continue
        text = "".join(
            child.content
            for child in inline.children or []
            if child.type in ("text", "code_inline")
        )
        base = slug(text.strip())
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def targets(path: Path) -> list[str]:
    """Every link and image target in the file, Markdown or inline HTML."""
    found: list[str] = []
    for token in inline_tokens(path):
        if token.type == "link_open":
            found.append(str(token.attrs["href"]))
        elif token.type == "image":
            found.append(str(token.attrs["src"]))
        elif token.type in ("html_inline", "html_block"):
            found.extend(HTML_TARGET.findall(token.content))
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in targets(path):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue  # an absolute URL: not this repository's to check
        where = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif (
            parts.fragment
            and where.suffix == ".md"
            and unquote(parts.fragment) not in anchors(where)
        ):
            broken.append(f"{target}: no heading with that anchor")
    return broken


def test_the_slug_follows_githubs_rule() -> None:
    assert slug("Context pressure and compaction") == "context-pressure-and-compaction"
    assert slug("`make lock`: the lock file") == "make-lock-the-lock-file"
    assert slug("Search, in 2 words — fast") == "search-in-2-words--fast"
    assert slug("Émile’s notes") == "émiles-notes"


def test_the_checker_finds_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n\n## A part\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-part-1) [no file](gone.md) [no anchor](other.md#nowhere)\n"
        '[here](#title) `[in code](gone.md)`\n\n<img src="missing.png">\n\n# Title\n'
    )
    assert broken_links(page) == [
        "gone.md: no such file",
        "other.md#nowhere: no heading with that anchor",
        "missing.png: no such file",
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for image in ("screenshot-conversation.png", "screenshot-phone.png"):
        assert f"static/{image}" in readme
    assert "docs/README.md" in targets(ROOT / "README.md")


def test_the_quick_start_is_the_two_make_commands() -> None:
    """docs/contract.md §5: `make run` and `make test`, both targets of the Makefile."""
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert "\nrun: install\n" in makefile and "\ntest: lint\n" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()


def test_every_document_is_indexed() -> None:
    index = targets(ROOT / "docs" / "README.md")
    reached = {(ROOT / "docs" / target.split("#", 1)[0]).resolve() for target in index}
    for path in DOCS:
        if path.parent != ROOT and path.name != "README.md":
            assert path in reached, f"{path.relative_to(ROOT)} is not in docs/README.md"
