"""Texts as the pages show them: folded past a few lines, cut to a side's byte budget or
to a bound, with labels that say how much is shown."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.utils.html import escape

from conversations.core.counting import preview

FOLD_LINES = 12
FOLD_CHARS = 1500
# Escaped UTF-8 bytes one side of one message may show (record; projection): both sides and
# their markup stay under one live frame (page_windows.FRAME_BYTES) whatever is stored.
SIDE_BYTES = 96 * 1024
# Escaped UTF-8 bytes the texts of one page's window may show, both sides of all its messages
# (each side may pass its cut by one block's markup): with the markup of a window of messages
# the page stays within 2 MB of HTML (docs/contract.md §4 Bounds).
PAGE_BYTES = 1280 * 1024
BLOCK_MARKUP = 900  # bytes a block's markup costs, besides its name, id and text
ONE_LINE_INPUT = 80  # characters: a tool input this short is shown as one line
SHOWN_CHARS = 4000  # per text on the compaction preview and the diff; a download has it whole


def folds(text: str) -> bool:
    return len(text) > FOLD_CHARS or text.count("\n") >= FOLD_LINES


def escaped_bytes(text: str) -> int:
    return len(escape(text).encode())


class Budget:
    """What is left of one side's bytes; `take` spends it on the longest prefix that fits."""

    def __init__(self, total: int = SIDE_BYTES) -> None:
        self.total = self.left = total

    @property
    def spent(self) -> int:
        return self.total - self.left

    def spend(self, cost: int) -> None:
        self.left -= cost

    def take(self, text: str) -> str:
        cost = escaped_bytes(text)
        while cost > max(self.left, 0):
            text = text[: int(len(text) * max(self.left, 0) / cost * 0.9)]
            cost = escaped_bytes(text)
        self.left -= cost
        return text


def water_level(spent: list[int], total: int) -> int:
    """The largest cut that keeps `spent` (bytes per side) within `total` once every side is
    cut to it: sides shorter than it stay whole, the others share what they leave."""
    left, sides = total, len(spent)
    for n in sorted(spent):
        if n * sides > left:
            return left // sides
        left, sides = left - n, sides - 1
    return max(spent, default=total)


@dataclass(frozen=True)
class Truncation:
    """A text shown only in part: its full size (UTF-8 bytes) and where the rest is served."""

    size: int
    rest_url: str

    @property
    def size_label(self) -> str:
        return preview.human_size(self.size)


def input_text(input_json: str) -> str:
    """A tool input as the record shows it: one line of JSON when that fits in
    `ONE_LINE_INPUT` characters, else indented (key order kept either way)."""
    value = json.loads(input_json)
    one = json.dumps(value, ensure_ascii=False)  # newlines in strings stay escaped
    if len(one) <= ONE_LINE_INPUT:
        return one
    return json.dumps(value, indent=2, ensure_ascii=False)


def line_count(text: str) -> int:
    """Lines as an editor counts them: a final newline ends the last line, starts none."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def size_note(text: str, cut: Truncation | None) -> str:
    """How much a text is: "40 lines, 1.2 kB" when it is shown whole, "first 400 lines,
    65.5 kB of 81.2 kB" for its start (`cut`: its truncation); one line says its size."""
    lines = line_count(text)
    size = preview.human_size(preview.size(text))
    what = f"{lines:,} lines, {size}" if lines > 1 else size
    if cut is None:
        return what
    return f"first {what} of {preview.human_size(cut.size)}"


def fold_label(text: str, cut: Truncation | None) -> str:
    """The label of a fold's button: "show all 40 lines, 1.2 kB" (or, for a text shown in
    part, "show the first 400 lines, 65.5 kB of 81.2 kB")."""
    note = size_note(text, cut)
    return f"show the {note}" if cut is not None else f"show all {note}"


def shown(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return text[:SHOWN_CHARS] + f"\n… ({len(text) - SHOWN_CHARS:,} more characters)"
