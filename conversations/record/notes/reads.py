"""Reads of notes (docs/contract.md §10): a window's notes, a conversation's, one note, who
may change it, and what `q` and `?label=` find. Every read is bounded: a message holds at
most `core.notes.MAX_PER_MESSAGE` notes, and lists come a page at a time."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from django.db.models import Count, F, Q, QuerySet, Window
from django.db.models.functions import Coalesce, Length, RowNumber, Substr

from conversations.core.finder import Cursor
from conversations.core.notes import (
    MAX_PER_MESSAGE,
    SHOWN_CHARS,
    SHOWN_PER_MESSAGE,
    MessageNotes,
    NoteValue,
)
from conversations.core.search import Query, parse_query, snippet
from conversations.record.models.notes import Note, NoteLabel
from conversations.record.notes.search import NoteMatches

DELETE_ANY = "conversations.delete_note"
ADD = "conversations.add_note"
LIST_PAGE = 500  # notes per answer of GET /api/conversations/ID/notes
ROW_LABELS = 6  # labels a list row shows at most
COUNT_CAP = 10_000  # note hits the finder counts at most


def value(note: Note, head: str | None = None, length: int | None = None) -> NoteValue:
    """A note as every surface reads it (`head`: only the start of its text was read, the
    whole being `length` characters)."""
    return NoteValue(
        id=note.pk,
        seq=note.message_seq,
        block=note.block_seq,
        text=note.text if head is None else head,
        labels=tuple(note.labels),
        author=note.author,
        user_id=note.user_id,
        token_label=note.token_label,
        created_at=note.created_at,
        updated_at=note.updated_at,
        length=length,
    )


def _notes(conversation_id: Any) -> QuerySet[Note]:
    return Note.objects.filter(conversation_id=conversation_id).order_by("message_seq", "id")


def notes_at(
    conversation_id: uuid.UUID | str, seqs: Iterable[int], *, every: bool = False
) -> dict[int, MessageNotes]:
    """Message seq → what a page shows of its notes, for these messages (a window, at most
    a document of them): the first SHOWN_PER_MESSAGE of each (`every`: all, at most
    MAX_PER_MESSAGE), each text read to SHOWN_CHARS, and how many it holds. One query."""
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    where = (
        Q(message_seq__gte=wanted[0], message_seq__lte=wanted[-1])
        if wanted[-1] - wanted[0] + 1 == len(wanted)
        else Q(message_seq__in=wanted)
    )
    by_message = [F("message_seq")]
    rows = (
        _notes(conversation_id)
        .filter(where)
        .annotate(
            rank=Window(RowNumber(), partition_by=by_message, order_by=F("id").asc()),
            total=Window(Count("id"), partition_by=by_message),
            head=Substr("text", 1, SHOWN_CHARS),
            length=Length("text"),
        )
        .defer("text", "words")
    )
    if not every:
        rows = rows.filter(rank__lte=SHOWN_PER_MESSAGE)
    grouped: dict[int, list[NoteValue]] = {}
    totals: dict[int, int] = {}
    for note in rows[: len(wanted) * MAX_PER_MESSAGE]:
        grouped.setdefault(note.message_seq, []).append(value(note, note.head, note.length))
        totals[note.message_seq] = note.total
    return {seq: MessageNotes(tuple(found), totals[seq]) for seq, found in grouped.items()}


def all_notes(conversation_id: uuid.UUID) -> dict[int, list[NoteValue]]:
    """Message seq → its notes, for the whole conversation (the export, which is the whole
    record anyway)."""
    found: dict[int, list[NoteValue]] = {}
    for note in _notes(conversation_id).iterator(chunk_size=500):
        found.setdefault(note.message_seq, []).append(value(note))
    return found


def notes_between(conversation_id: uuid.UUID, start: int, stop: int) -> dict[int, list[NoteValue]]:
    """Message seq → its notes, whole, for the messages from `start` to before `stop` (a
    streamed export's batch: at most MAX_PER_MESSAGE a message). One query."""
    found: dict[int, list[NoteValue]] = {}
    rows = _notes(conversation_id).filter(message_seq__gte=start, message_seq__lt=stop)
    for note in rows.iterator(chunk_size=500):
        found.setdefault(note.message_seq, []).append(value(note))
    return found


def note_page(conversation_id: uuid.UUID, *, after: int = 0) -> tuple[list[NoteValue], bool]:
    """A conversation's notes by id after `after`, a page of them, and whether more follow."""
    rows = list(
        Note.objects.filter(conversation_id=conversation_id, pk__gt=after).order_by("id")[
            : LIST_PAGE + 1
        ]
    )
    return [value(n) for n in rows[:LIST_PAGE]], len(rows) > LIST_PAGE


def note_get(note_id: int | str, conversation_id: uuid.UUID | None = None) -> Note | None:
    try:
        pk = int(note_id)
    except (TypeError, ValueError):
        return None
    found = Note.objects.filter(pk=pk)
    if conversation_id is not None:
        found = found.filter(conversation_id=conversation_id)
    return found.first()


def may_edit(note: Note | NoteValue, user: Any) -> bool:
    """A signed-in user edits (and deletes) the notes they wrote."""
    user_id = note.user_id
    return user_id is not None and getattr(user, "pk", None) == user_id


def may_delete(note: Note | NoteValue, user: Any) -> bool:
    """Their author, or a user with conversations.delete_note."""
    return may_edit(note, user) or bool(user.has_perm(DELETE_ANY))


def token_may_edit(note: Note, label: str) -> bool:
    """On the API the author is the token's label: another token may not."""
    return note.user_id is None and bool(note.token_label) and note.token_label == label


def conversations_with_note_words(q: str) -> QuerySet[Note, Any]:
    """The notes holding every word of `q`, through their full-text index (a query with
    words in it): a subquery of conversation ids for the list's search."""
    return Note.objects.filter(NoteMatches(parse_query(q))).values("conversation_id")


NOTED_CONVERSATIONS = 10_000  # conversations whose ids a list search reads from the notes


def conversation_ids_with_note_words(q: str) -> list[uuid.UUID] | None:
    """The ids of the conversations with a note holding every word of `q`, read at once
    through the notes' index: a list that walks conversations (with bitmap scans off, so
    never through a GIN index) then never asks their notes one by one. None when there
    are more than NOTED_CONVERSATIONS: ask `conversations_with_note_words` instead."""
    rows = conversations_with_note_words(q).order_by().values_list("conversation_id", flat=True)
    ids = list(rows.distinct()[: NOTED_CONVERSATIONS + 1])
    return ids if len(ids) <= NOTED_CONVERSATIONS else None


def conversations_labelled(label: str) -> QuerySet[NoteLabel, Any]:
    """Conversation ids with a note labelled `label` (by the label's index)."""
    return NoteLabel.objects.filter(name=label).values("conversation_id")


def labels_of(conversation_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[str]]:
    """Conversation id → the labels of its notes, sorted, at most ROW_LABELS each (a list
    page's rows): one query, bounded by the page."""
    if not conversation_ids:
        return {}
    rows = (
        NoteLabel.objects.filter(conversation_id__in=conversation_ids)
        .values_list("conversation_id", "name")
        .order_by("conversation_id", "name")
        .distinct()[: len(conversation_ids) * ROW_LABELS * 4]
    )
    found: dict[uuid.UUID, list[str]] = {}
    for conversation_id, name in rows:
        labels = found.setdefault(conversation_id, [])
        if len(labels) < ROW_LABELS:
            labels.append(name)
    return found


def note_hits(conversation_id: uuid.UUID, q: str, *, limit: int) -> list[NoteValue]:
    """The conversation's notes holding every word of `q`, in (message, id) order, at
    most `limit` (the finder's)."""
    query = parse_query(q)
    if query.empty:
        return []
    return [value(n) for n in _notes(conversation_id).filter(NoteMatches(query))[:limit]]


def first_note_hits(
    conversations: Iterable[Any], query: Query
) -> dict[uuid.UUID, tuple[int, int, str]]:
    """For each of these conversations (a list page's, bounded), its first note holding
    every word of `query`, in (message, block, id) order: (message seq, block seq or 0, a
    snippet of the note's text), by conversation id. One indexed query per conversation."""
    found: dict[uuid.UUID, tuple[int, int, str]] = {}
    if query.empty:
        return found
    for conversation in conversations:
        note = (
            Note.objects.filter(
                NoteMatches(query),
                conversation_id=conversation.pk,
                message_seq__lt=conversation.message_count,
            )
            .annotate(place=Coalesce("block_seq", 0))
            .order_by("message_seq", "place", "id")
            .values_list("message_seq", "place", "text")
            .first()
        )
        if note is not None:
            found[conversation.pk] = (note[0], note[1], snippet(note[2], query))
    return found


class NotePlaces:
    """The finder's note hits in one conversation (docs/contract.md §10): each note that
    holds every word of the query is a hit at (its message, its block or 0), merged in
    order with the blocks' hits; bounded as they are (a page, counts capped)."""

    def __init__(self, conversation: Any, query: Query, *, shown: bool = True) -> None:
        """`shown` False: none (a share link made without notes)."""
        self.query = query
        self.notes = (
            (Note.objects if shown else Note.objects.none())
            .filter(
                NoteMatches(query),
                conversation=conversation,
                message_seq__lt=conversation.message_count,
            )
            .annotate(place=Coalesce("block_seq", 0))
            .order_by("message_seq", "place", "id")
        )
        self.found: dict[tuple[int, int], str] = {}  # place → a snippet of its first note

    @staticmethod
    def _after(cursor: Cursor) -> Q:
        if cursor.block is None:
            return Q(message_seq__gt=cursor.seq)
        return Q(message_seq__gt=cursor.seq) | Q(message_seq=cursor.seq, place__gt=cursor.block)

    @staticmethod
    def _before(cursor: Cursor) -> Q:
        if cursor.block is None:
            return Q(message_seq__lt=cursor.seq)
        return Q(message_seq__lt=cursor.seq) | Q(message_seq=cursor.seq, place__lt=cursor.block)

    def merged(
        self,
        places: list[tuple[int, int]],
        *,
        after: Cursor | None,
        before: Cursor | None,
        limit: int,
    ) -> list[tuple[int, int]]:
        """`places` (the blocks' hits, in the direction asked) with the notes' places in
        the same direction, the first `limit` of them."""
        notes = self.notes
        if before is not None:
            notes = notes.filter(self._before(before)).order_by("-message_seq", "-place", "-id")
        elif after is not None:
            notes = notes.filter(self._after(after))
        for note in notes[:limit]:
            place = (note.message_seq, note.place)
            self.found.setdefault(place, snippet(note.text, self.query))
        merged = sorted({*places, *self.found}, reverse=before is not None)
        return merged[:limit]

    def count(self, *, before: Cursor | None = None) -> int:
        """Notes found (ahead of `before`), counted up to a bound."""
        notes = self.notes if before is None else self.notes.filter(self._before(before))
        return notes.order_by()[:COUNT_CAP].count()

    def hits(self, hits: list[Any], places: Sequence[tuple[int, int]]) -> list[Any]:
        """The blocks' hits with a note's hit at each place only a note holds."""
        by_place = {(hit.seq, hit.block): hit for hit in hits}
        out = []
        for place in places:
            if place in by_place:
                out.append(by_place[place])
            elif place in self.found:
                out.append(NoteHit(place[0], place[1], "note", False, self.found[place]))
        return out


class NoteHit(NamedTuple):
    """A finder hit that is a note (the shape of `finder_reads.Hit`)."""

    seq: int
    block: int
    type: str
    is_error: bool
    snippet: str
