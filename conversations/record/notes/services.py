"""Notes (docs/contract.md §10): added, edited and deleted here, each announced on commit as
`conversation.note_changed`. Who may edit or delete a note is the callers' question
(`record.notes.reads.may_edit`); these only store."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from conversations.core import notes
from conversations.core.search import index_words
from conversations.record import events
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation, Message
from conversations.record.models.notes import Note, NoteLabel


def _checked(field: str, check: Any, value: object) -> Any:
    try:
        return check(value)
    except notes.NoteError as exc:
        raise IngestError(exc.field, exc.message) from None


def note_add(
    *,
    conversation: Conversation,
    message_seq: int,
    text: str,
    labels: Sequence[str] = (),
    block_seq: int | None = None,
    user: Any = None,
    token_label: str = "",
) -> Note:
    """Store a note on message `message_seq` (or its block `block_seq`), written by `user`
    (a signed-in user) or by the token labelled `token_label`. Raises IngestError naming
    the field (the text, a label, the message or block, a message already holding
    MAX_PER_MESSAGE notes); broadcasts note_changed on commit."""
    text = _checked("text", notes.checked_text, text)
    kept = _checked("labels", notes.checked_labels, list(labels))
    if (user is None) == (not token_label):
        raise ValueError("a note has one author: a user or a token's label")
    author = user.get_username() if user is not None else token_label
    with transaction.atomic():
        # The message's row lock: two notes added at once cannot both pass the cap.
        message = (
            Message.objects.select_for_update()
            .filter(conversation=conversation, seq=message_seq)
            .first()
        )
        if message is None:
            raise IngestError("seq", f"message {message_seq} is not in this conversation")
        if block_seq is not None and not 0 <= block_seq < message.block_count:
            raise IngestError(
                "block",
                f"message {message_seq} has no block {block_seq} (it has {message.block_count})",
            )
        held = Note.objects.filter(conversation=conversation, message_seq=message_seq).count()
        if held >= notes.MAX_PER_MESSAGE:
            raise IngestError(
                "seq", f"message {message_seq} holds {notes.MAX_PER_MESSAGE} notes already"
            )
        now = timezone.now()
        note = Note.objects.create(
            conversation=conversation,
            message_seq=message_seq,
            block_seq=block_seq,
            text=text,
            labels=list(kept),
            author=author[:200],
            user=user,
            token_label=token_label,
            words=index_words(text),
            created_at=now,
            updated_at=now,
        )
        _label(note, kept)
        _announce(note)
    return note


def note_edit(*, note: Note, text: str | None = None, labels: Sequence[str] | None = None) -> Note:
    """Change a note's text and/or labels (IngestError naming the field), on the note as
    stored when its row is locked; broadcasts note_changed on commit."""
    with transaction.atomic():
        # The note's row lock: two edits at once run one after the other, so the label rows
        # are always the last writer's (each deletes what the one before it wrote).
        locked = Note.objects.select_for_update().filter(pk=note.pk).first()
        if locked is None:
            raise IngestError("note", f"note {note.pk} was deleted meanwhile")
        if text is not None:
            locked.text = _checked("text", notes.checked_text, text)
            locked.words = index_words(locked.text)
        if labels is not None:
            kept = _checked("labels", notes.checked_labels, list(labels))
            locked.labels = list(kept)
            NoteLabel.objects.filter(note=locked).delete()
            _label(locked, kept)
        locked.updated_at = timezone.now()
        locked.save(update_fields=["text", "words", "labels", "updated_at"])
        _announce(locked)
    return locked


def note_delete(*, note: Note) -> None:
    """Delete a note (its labels with it); broadcasts note_changed on commit."""
    with transaction.atomic():
        Note.objects.filter(pk=note.pk).delete()
        _announce(note)


def _label(note: Note, labels: Sequence[str]) -> None:
    NoteLabel.objects.bulk_create(
        NoteLabel(note=note, conversation_id=note.conversation_id, name=name) for name in labels
    )


def _announce(note: Note) -> None:
    events.publish_on_commit(
        {
            "type": "conversation.note_changed",
            "conversation_id": str(note.conversation_id),
            "message_seq": note.message_seq,
            "change": uuid.uuid4().hex,
        }
    )
