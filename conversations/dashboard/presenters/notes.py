"""The notes beside a message's record (docs/contract.md §10): what the page and every live
frame print for them. Views and the render step fetch the notes; this shapes them.

The same markup goes to every viewer (one rendering per change, however many sockets):
each note names its author's user id, and the page's script shows the edit and delete
buttons to whom they apply (the server checks every change again)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.urls import reverse

from conversations.core.notes import (
    MAX_LABELS,
    MAX_TEXT_CHARS,
    SHOWN_CHARS,
    MessageNotes,
    NoteValue,
)
from conversations.web.links import note_add_url

NONE = MessageNotes()


@dataclass(frozen=True)
class NoteItem:
    id: int
    text: str  # its start, when longer than SHOWN_CHARS
    more: int  # characters past the start shown (0: the whole text)
    labels: tuple[str, ...]
    author: str
    user_id: int | None
    block: int | None
    created_at: datetime
    edited: bool
    when: str  # created_at as the page prints it (UTC; the page's script makes it local)
    when_iso: str
    full_url: str  # the note whole (and, with ?edit=1, its edit form)
    delete_url: str
    max_text: int = MAX_TEXT_CHARS


@dataclass(frozen=True)
class NotesView:
    seq: int
    items: list[NoteItem]
    add_url: str  # "" when read-only (a share link's page); GET: every note of the message
    block_count: int  # a new note names one of them by number (a field, not a list)
    error: str = ""
    hidden: int = 0  # notes past the ones shown
    max_text: int = MAX_TEXT_CHARS
    max_labels: int = MAX_LABELS

    @property
    def readonly(self) -> bool:
        return not self.add_url

    @property
    def last_block(self) -> int:
        return self.block_count - 1


def note_item(
    conversation_id: uuid.UUID | str, note: NoteValue, *, whole: bool = False
) -> NoteItem:
    shown = note.text if whole else note.text[:SHOWN_CHARS]
    args = [str(conversation_id), note.id]
    return NoteItem(
        id=note.id,
        text=shown,
        more=note.size - len(shown),
        labels=note.labels,
        author=note.author,
        user_id=note.user_id,
        block=note.block,
        created_at=note.created_at,
        edited=note.edited,
        when=note.created_at.strftime("%Y-%m-%d %H:%M"),
        when_iso=note.created_at.isoformat(timespec="seconds"),
        full_url=reverse("note", args=args),
        delete_url=reverse("note-delete", args=args),
    )


def notes_view(
    conversation_id: uuid.UUID | str,
    seq: int,
    block_count: int,
    notes: MessageNotes,
    *,
    readonly: bool = False,
    error: str = "",
) -> NotesView:
    """One message's notes as shown (`notes`: `note_reads.notes_at`'s for it)."""
    return NotesView(
        seq=seq,
        items=[note_item(conversation_id, n) for n in notes.notes],
        add_url="" if readonly else note_add_url(conversation_id, seq),
        block_count=block_count,
        error=error,
        hidden=notes.hidden,
    )
