"""Previews of long texts (docs/contract.md §4 Bounds): a text longer than 64 KB or 400 lines
shows its start, its full size and a way to the rest. Pure.

A preview is cut in characters; full sizes are in UTF-8 bytes, which both databases
know without reading the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass

CHARS = 64 * 1024
LINES = 400


def cut(text: str, chars: int = CHARS, lines: int = LINES) -> str:
    """The start of `text`: at most `chars` characters and `lines` lines."""
    text = text[:chars]
    end = -1
    for _ in range(lines):
        end = text.find("\n", end + 1)
        if end == -1:
            return text
    return text[:end]


def size(text: str) -> int:
    """A text's size as the database measures it: UTF-8 bytes."""
    return len(text.encode())


@dataclass(frozen=True)
class Shown:
    """What a page shows of a text: `text` is a prefix of it, `size` its full size (bytes)."""

    text: str
    size: int

    @property
    def truncated(self) -> bool:
        return size(self.text) < self.size


def shown(start: str, full: int, chars: int = CHARS, lines: int = LINES) -> Shown:
    """The preview of a text of `full` bytes of which `start` (a prefix) is known."""
    return Shown(cut(start, chars, lines), full)


def human_size(n: int) -> str:
    """A size for operators: "10.5 MB", "65.5 kB", "12 bytes" (decimal units)."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    if n >= 1_000:
        return f"{n / 1_000:.1f} kB"
    return f"{n:,} bytes"
