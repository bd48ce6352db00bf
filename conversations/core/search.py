"""Search words: the one definition of a word, shared by the index and the query
(docs/contract.md §3).

Text is NFKC-normalised and case-folded in every script (`ΣΊΣΥΦΟΣ` and `σίσυφος` are one
word, `Straße` is `strasse`), accents on Latin, Greek and Cyrillic letters are dropped
(`Émile` is `emile`), then split into words: runs of letters, digits and combining marks,
except that each Han, Hiragana and Katakana character is a word of its own. Both databases
store and look up these words verbatim, so they match alike whatever their locale.
Pure: no Django.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import assert_never

from conversations.core.blocks import (
    Block,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

MAX_QUERY_CHARS = 200  # docs/contract.md §3: a longer `q` is refused
# Only the start of each block is indexed: it bounds the work per block and keeps every
# entry well under PostgreSQL's 1 MB tsvector limit (at most 100,000 words of 4 bytes).
INDEXED_CHARS = 100_000
# A tool result is indexed in its start and its end (docs/contract.md §3): what ran and how it ended
# (a command's echo, a file's head, a traceback, a test summary) is what operators look
# for; the middle of a 20 KB listing was half the index and almost never searched.
RESULT_HEAD_CHARS = 2_000
RESULT_TAIL_CHARS = 1_000
MAX_WORD_CHARS = 100  # longer words (hashes, base64) are cut to this, in text and query
# A one-character word matches only itself: as a prefix it would match half the index.
MIN_PREFIX_CHARS = 2
# A query's words beyond this many are refused: each one is an index lookup.
MAX_QUERY_WORDS = 16
SNIPPET_CHARS = 160  # around the first match in a block
SNIPPET_SCAN_CHARS = 20_000  # a match further in shows the block's start instead

_CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_ACCENTS = "\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_ACCENTED = "\u0000-\u052f\u1e00-\u1fff"  # Latin, Greek, Cyrillic (and their extensions)


def _mark_ranges() -> str:
    """Every combining mark as a regex class body: marks belong to the word they are in
    (Devanagari vowel signs, Hebrew points), not between words."""
    ranges: list[str] = []
    start = previous = -2
    # Marks live below U+20000 but for the variation selectors (scanning all of Unicode
    # would cost every process a fifth of a second at import).
    for code in [*range(0x20000), *range(0xE0100, 0xE01F0)]:
        if unicodedata.category(chr(code))[0] != "M":
            continue
        if code != previous + 1:
            if start >= 0:
                ranges.append(f"{chr(start)}-{chr(previous)}")
            start = code
        previous = code
    ranges.append(f"{chr(start)}-{chr(previous)}")
    return "".join(ranges)


_STRIP_ACCENTS = re.compile(f"(?<=[{_ACCENTED}])[{_ACCENTS}]+")
_WORD = re.compile(f"[{_CJK}]|(?:[^\\W_{_CJK}]|[{_mark_ranges()}])+")
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")


class QueryError(ValueError):
    """A search `q` that cannot be run; the message names `q` and says why."""

    field = "q"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Query:
    """The words to find, all in one block or title; `prefixes` match as word starts."""

    words: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.words and not self.prefixes


def fold(text: str) -> str:
    """The text in the form words are compared in: NFKC, case-folded, accents dropped."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return unicodedata.normalize("NFC", _STRIP_ACCENTS.sub("", decomposed))


# A word of ASCII text: the same words `_WORD` finds there (no marks, no CJK in ASCII),
# found six times faster (most of what agents store is ASCII; ingest splits all of it).
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """The words of `text` in order (repeats kept), each cut to MAX_WORD_CHARS."""
    folded = fold(text)
    pattern = _ASCII_WORD if folded.isascii() else _WORD
    return [word[:MAX_WORD_CHARS] for word in pattern.findall(folded)]


def index_words(text: str) -> str:
    """What the index stores for `text`: its distinct words in its first INDEXED_CHARS
    characters, in first-seen order, joined by single spaces ("" when it has none)."""
    return " ".join(dict.fromkeys(words(text[:INDEXED_CHARS])))


def block_text(block: Block) -> str:
    """The searchable text of a block: its text, a tool's name with its input's keys and
    values or its result's content (its first RESULT_HEAD_CHARS and last
    RESULT_TAIL_CHARS characters); an image has none."""
    match block:
        case TextBlock(text=text) | ReasoningBlock(text=text):
            return text
        case ToolUseBlock(name=name, input_json=input_json):
            # JSON escapes (\n, \u0007) would glue words together: they become spaces.
            return f"{name} {_JSON_ESCAPE.sub(' ', input_json[:INDEXED_CHARS])}"
        case ToolResultBlock(name=name, content=content):
            if len(content) > RESULT_HEAD_CHARS + RESULT_TAIL_CHARS:
                # A word cut at either edge is indexed as the part kept.
                content = f"{content[:RESULT_HEAD_CHARS]} {content[-RESULT_TAIL_CHARS:]}"
            return f"{name} {content}"
        case ImageBlock():
            return ""
        case _:
            assert_never(block)


def snippet(text: str, query: Query) -> str:
    """About SNIPPET_CHARS characters of `text` around the first word `query` finds in its
    first SNIPPET_SCAN_CHARS (else its start), on one line, `…` where it is cut."""
    head = text[:SNIPPET_SCAN_CHARS]
    start = _first_match(head, query)
    begin = max(0, start - SNIPPET_CHARS // 3)
    space = text.find(" ", begin, start)
    if begin > 0 and space != -1:
        begin = space + 1  # start at a word, not inside one
    end = begin + SNIPPET_CHARS
    line = " ".join(text[begin:end].split())
    return ("…" if begin > 0 else "") + line + ("…" if end < len(text) else "")


def _first_match(text: str, query: Query) -> int:
    """Where the first word of `text` that `query` finds begins (0 when none does)."""
    exact, prefixes = set(query.words), query.prefixes
    folded = fold(text)
    if len(folded) == len(text):  # the usual case: positions in both are the same
        for match in _WORD.finditer(folded):
            word = match.group()[:MAX_WORD_CHARS]
            if word in exact or word.startswith(prefixes):
                return match.start()
        return 0
    for match in _WORD.finditer(text):  # folding moved characters: fold word by word
        for word in words(match.group()):
            if word in exact or word.startswith(prefixes):
                return match.start()
    return 0


def parse_query(q: str) -> Query:
    """A search as typed: words in any order, each found as a word or a word's start
    (one-character words only as words). Raises QueryError for a `q` the API refuses."""
    if len(q) > MAX_QUERY_CHARS:
        raise QueryError(
            f"q is {len(q):,} characters long; a search may have at most {MAX_QUERY_CHARS}."
        )
    found = list(dict.fromkeys(words(q)))
    if len(found) > MAX_QUERY_WORDS:
        raise QueryError(
            f"q has {len(found)} different words; a search may have at most {MAX_QUERY_WORDS}."
        )
    short = tuple(word for word in found if len(word) < MIN_PREFIX_CHARS)
    long = [word for word in found if len(word) >= MIN_PREFIX_CHARS]
    # Every word that starts another word of the query is implied by it.
    prefixes = tuple(
        word for word in long if not any(o != word and o.startswith(word) for o in long)
    )
    return Query(words=short, prefixes=prefixes)
