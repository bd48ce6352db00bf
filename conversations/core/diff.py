"""Projection diffs: two payloads aligned message by message, with a text diff inside each.

Pure. Alignment is difflib's longest matching runs over (role, text) keys, so a message
inserted in one run of a task does not shift every later comparison; a changed pair gets
a word-level diff (line-level past a size where word diffs stop being cheap).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from conversations.core.replay import Payload, WireMessage

Op = Literal["equal", "insert", "delete"]
Status = Literal["same", "changed", "left", "right"]
WORD_DIFF_LIMIT = 20_000  # pieces per side; beyond it, lines
PIECES = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass(frozen=True, slots=True)
class Segment:
    op: Op
    text: str


@dataclass(frozen=True, slots=True)
class Side:
    """One message of one payload: its position there, its role, its content as text."""

    index: int
    role: str
    text: str


@dataclass(frozen=True, slots=True)
class Row:
    """One aligned pair: `same`, `changed` (both sides, with `segments`), or a message
    found only on the `left` or only on the `right`."""

    status: Status
    left: Side | None
    right: Side | None
    segments: tuple[Segment, ...] = ()


def content_text(message: WireMessage) -> str:
    """The content as one text: parts in order, an image part named by its media type."""
    content = message["content"]
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content:
        if part["type"] == "text":
            out.append(part["text"])
        elif part["type"] == "image_url":
            media_type = part["image_url"]["url"].partition(";")[0].removeprefix("data:")
            out.append(f"[image part ({media_type})]")
        else:
            out.append(f"[image part ({part['source']['media_type']})]")
    return "\n\n".join(out)


def sides(payload: Payload) -> list[Side]:
    """A payload's messages as sides; Anthropic's `system` string comes first, as system."""
    out: list[Side] = []
    system = payload.get("system")
    if isinstance(system, str):
        out.append(Side(0, "system", system))
    for message in payload["messages"]:
        out.append(Side(len(out), message["role"], content_text(message)))
    return out


def text_diff(left: str, right: str) -> tuple[Segment, ...]:
    """Left → right as equal, delete and insert segments (words, or lines when long)."""
    a, b = PIECES.findall(left), PIECES.findall(right)
    if len(a) > WORD_DIFF_LIMIT or len(b) > WORD_DIFF_LIMIT:
        a, b = left.splitlines(keepends=True), right.splitlines(keepends=True)
    # The pieces both sides start and end with are equal runs as they are; only what lies
    # between is matched (a cleared tool result: its message's other text is not re-matched).
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    matcher = difflib.SequenceMatcher(None, middle_a, middle_b, autojunk=False)
    # Runs of changes separated only by whitespace read as one change: merge them, so a
    # replaced sentence is one deletion and one insertion, not a word-by-word interleave.
    runs: list[tuple[str, str, str]] = []  # (op, left text, right text)
    if head:
        runs.append(("equal", "".join(a[:head]), "".join(b[:head])))
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        left_text, right_text = "".join(middle_a[i1:i2]), "".join(middle_b[j1:j2])
        op = "equal" if tag == "equal" else "change"
        if runs and runs[-1][0] == op == "equal":  # the head run and an equal start
            _, l0, r0 = runs.pop()
            left_text, right_text = l0 + left_text, r0 + right_text
        runs.append((op, left_text, right_text))
    if tail:
        left_text, right_text = "".join(a[len(a) - tail :]), "".join(b[len(b) - tail :])
        if runs and runs[-1][0] == "equal":
            _, l0, r0 = runs.pop()
            left_text, right_text = l0 + left_text, r0 + right_text
        runs.append(("equal", left_text, right_text))
    merged: list[tuple[str, str, str]] = []
    for k, (op, left_text, right_text) in enumerate(runs):
        between = 0 < k < len(runs) - 1 and (not left_text.strip())
        if op == "equal" and between:
            op = "change"
        if merged and merged[-1][0] == op == "change":
            _, l0, r0 = merged.pop()
            merged.append(("change", l0 + left_text, r0 + right_text))
        else:
            merged.append((op, left_text, right_text))
    segments: list[Segment] = []
    for op, left_text, right_text in merged:
        if op == "equal":
            segments.append(Segment("equal", left_text))
            continue
        if left_text:
            segments.append(Segment("delete", left_text))
        if right_text:
            segments.append(Segment("insert", right_text))
    return tuple(segments)


def align(left: Sequence[Side], right: Sequence[Side]) -> list[Row]:
    """Every message of both sides once, in order: matched, changed, or on one side only."""
    keys_a = [(s.role, s.text) for s in left]
    keys_b = [(s.role, s.text) for s in right]
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    rows: list[Row] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(Row("same", left[i1 + k], right[j1 + k]) for k in range(i2 - i1))
            continue
        pairs = min(i2 - i1, j2 - j1)
        for k in range(pairs):
            a, b = left[i1 + k], right[j1 + k]
            rows.append(Row("changed", a, b, text_diff(a.text, b.text)))
        rows.extend(Row("left", left[i], None) for i in range(i1 + pairs, i2))
        rows.extend(Row("right", None, right[j]) for j in range(j1 + pairs, j2))
    return rows


def diff(left: Payload, right: Payload) -> list[Row]:
    return align(sides(left), sides(right))
