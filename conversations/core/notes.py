"""Notes (docs/contract.md §10): what a note may hold, and the plain value every surface
reads. Pure: no Django.

A note is an operator's text and labels on a message (or one block of it). It is never
part of the record's replay: nothing here is imported by the projection or the counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

MAX_TEXT_CHARS = 10_000
MAX_LABELS = 5
MAX_LABEL_CHARS = 40
# A message holds at most this many notes; a page and a frame show the first
# SHOWN_PER_MESSAGE of them, each to SHOWN_CHARS, and load the rest on demand: a message's
# notes add at most about 30 KB to its frame, whatever they hold.
MAX_PER_MESSAGE = 20
SHOWN_PER_MESSAGE = 5
SHOWN_CHARS = 500
_LABEL = re.compile(rf"[a-z0-9-]{{1,{MAX_LABEL_CHARS}}}")


class NoteError(ValueError):
    """A note that cannot be stored: `field` names what is wrong, `message` says how."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def checked_text(text: object) -> str:
    """The note's text, 1 to MAX_TEXT_CHARS characters and not only whitespace."""
    if not isinstance(text, str):
        raise NoteError("text", "must be a string")
    if not text.strip():
        raise NoteError("text", "must not be empty")
    if len(text) > MAX_TEXT_CHARS:
        raise NoteError("text", f"must be at most {MAX_TEXT_CHARS:,} characters, not {len(text):,}")
    if "\x00" in text:
        raise NoteError("text", "must not contain a NUL character (U+0000)")
    return text


def checked_labels(labels: object) -> tuple[str, ...]:
    """Up to MAX_LABELS labels of lowercase a-z, 0-9 and '-' (1 to 40 characters each),
    repeats dropped, order kept."""
    if not isinstance(labels, list | tuple):
        raise NoteError("labels", "must be a list of strings")
    kept: list[str] = []
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise NoteError(
                f"labels[{i}]",
                f"must be 1 to {MAX_LABEL_CHARS} characters of lowercase a-z, 0-9 and '-'",
            )
        if label not in kept:
            kept.append(label)
    if len(kept) > MAX_LABELS:
        raise NoteError("labels", f"at most {MAX_LABELS} labels, not {len(kept)}")
    return tuple(kept)


def checked_label(label: str) -> str:
    """One label as a filter takes it (`?label=`)."""
    if not _LABEL.fullmatch(label):
        raise NoteError(
            "label", f"must be 1 to {MAX_LABEL_CHARS} characters of lowercase a-z, 0-9 and '-'"
        )
    return label


def parse_labels(text: str) -> tuple[str, ...]:
    """A form's labels field: labels separated by commas or spaces."""
    return checked_labels([part for part in re.split(r"[,\s]+", text) if part])


@dataclass(frozen=True, slots=True)
class NoteValue:
    """One stored note as every surface reads it."""

    id: int
    seq: int  # the message's
    block: int | None  # the block's seq in its message; None: the whole message
    text: str
    labels: tuple[str, ...]
    author: str
    user_id: int | None  # the signed-in author's; None when a token wrote it
    token_label: str  # the token's label when a token wrote it, else ""
    created_at: datetime
    updated_at: datetime
    length: int | None = None  # the whole text's, when `text` is only its start

    @property
    def edited(self) -> bool:
        return self.updated_at != self.created_at

    @property
    def size(self) -> int:
        """The whole text's length in characters."""
        return len(self.text) if self.length is None else self.length


@dataclass(frozen=True, slots=True)
class MessageNotes:
    """What a page shows of one message's notes: the first few (or all) and how many."""

    notes: tuple[NoteValue, ...] = ()
    total: int = 0

    @property
    def hidden(self) -> int:
        return self.total - len(self.notes)


def by_message(notes: Sequence[NoteValue]) -> dict[int, list[NoteValue]]:
    """Message seq → its notes, in the order given."""
    grouped: dict[int, list[NoteValue]] = {}
    for note in notes:
        grouped.setdefault(note.seq, []).append(note)
    return grouped
