"""notes: split from conversations.record.models."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from conversations.record.models.conversation import Conversation


class Note(models.Model):
    """An operator's note on a message, or on one block of it (docs/contract.md §10).

    Never part of the record's replay: no projection, payload or count reads this table.
    `author` is the user's name or the API token's label; `user` is set when a signed-in
    user wrote it (their notes are theirs to edit), `token_label` when a token did.
    `words` are `core.search.index_words` of the text, under a full-text index of their
    own (`record.notes.search`).
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    message_seq = models.PositiveIntegerField()
    block_seq = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    labels = models.JSONField(default=list, blank=True)
    author = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    token_label = models.CharField(max_length=200, blank=True, default="")
    words = models.TextField(blank=True, default="", editable=False)
    # Set by the services, equal until the note is edited.
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["conversation_id", "message_seq", "id"]
        indexes = [
            models.Index(fields=["conversation", "message_seq", "id"], name="note_by_message"),
        ]

    def __str__(self) -> str:
        return f"note {self.pk} on #{self.message_seq}"


class NoteLabel(models.Model):
    """One label of one note, for `?label=` (an index by name) and the list's rows."""

    note = models.ForeignKey(Note, on_delete=models.CASCADE, related_name="label_rows")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    name = models.CharField(max_length=40)

    class Meta:
        indexes = [
            models.Index(fields=["name", "conversation"], name="note_label_by_name"),
            models.Index(fields=["conversation", "name"], name="note_label_by_conversation"),
        ]

    def __str__(self) -> str:
        return self.name
