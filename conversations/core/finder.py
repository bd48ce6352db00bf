"""Finding things in one conversation (docs/guide/dashboard.md): what the page's finder
asks for. Pure.

A place in a conversation is a `Cursor`, a message seq and optionally a block seq
(`"412"` or `"412.3"` in a query). The finder steps from one towards the end (`after`)
or the start (`before`) looking for blocks of a `FindKind`, or for search hits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

# What the finder looks for: the page's filters, and "problems" for n / N.
FindKind: TypeAlias = Literal["problem", "error", "tool", "reasoning", "image"]
FIND_KINDS: tuple[FindKind, ...] = ("problem", "error", "tool", "reasoning", "image")

MAX_SEQ_DIGITS = 9  # as the windows endpoint: a seq is at most 999,999,999
_CURSOR = re.compile(rf"(\d{{1,{MAX_SEQ_DIGITS}}})(?:\.(\d{{1,{MAX_SEQ_DIGITS}}}))?")


class FindError(ValueError):
    """A finder query that cannot be run; the message names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """A place: message `seq`, and block `block` in it (None: the message as a whole, so
    "after 412" is past all of message 412 and "before 412" ahead of all of it)."""

    seq: int
    block: int | None = None

    def __str__(self) -> str:
        return str(self.seq) if self.block is None else f"{self.seq}.{self.block}"


def parse_cursor(field: str, value: str) -> Cursor:
    """`"412"` or `"412.3"`; anything else is a FindError naming `field`."""
    match = _CURSOR.fullmatch(value)
    if match is None:
        raise FindError(
            field, f"{field} must be a message number, or message.block (such as 412.3)."
        )
    seq, block = match.groups()
    return Cursor(int(seq), None if block is None else int(block))


def parse_kind(value: str) -> FindKind:
    for kind in FIND_KINDS:
        if value == kind:
            return kind
    raise FindError("kind", f"kind must be one of {', '.join(FIND_KINDS)}, or text (with q).")
