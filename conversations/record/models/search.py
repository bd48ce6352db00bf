"""search: split from conversations.record.models."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from conversations.record.models.conversation import Conversation


class SearchEntry(models.Model):
    """The words of one block (message_seq, block_seq) or of a conversation's title (both
    null), as `core.search.index_words` makes them, for full-text search (docs/contract.md §3).

    Written by `services` in the transaction that stores the block or title; deleted with
    the conversation. The full-text index over `words` is the database's own (see
    `record.search.index`); on SQLite it is kept by triggers on this table, so a migration that
    rebuilds this table must run `search.install` again.
    """

    # Indexed by the unique constraint below, whose first column it is.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    message_seq = models.PositiveIntegerField(null=True)
    block_seq = models.PositiveIntegerField(null=True)
    words = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "message_seq", "block_seq"], name="search_entry_unique"
            ),
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(message_seq__isnull=True),
                name="search_entry_one_title",
            ),
            models.CheckConstraint(
                condition=Q(message_seq__isnull=True, block_seq__isnull=True)
                | Q(message_seq__isnull=False, block_seq__isnull=False),
                name="search_entry_block_or_title",
            ),
        ]
        verbose_name_plural = "search entries"

    def __str__(self) -> str:
        if self.message_seq is None:
            return "title"
        return f"#{self.message_seq}.{self.block_seq}"


class FinderMark(models.Model):
    """A block the finder's "next problem" stops at (docs/contract.md §4 finding): a tool
    result with `is_error` ("error"), or a tool call with no result anywhere in its
    conversation yet ("unanswered", removed when its first result is stored).

    Written by `services` with the blocks, so that the next one from anywhere in a
    conversation is one indexed lookup, not a walk over its blocks (docs/contract.md §3)."""

    class Kind(models.TextChoices):
        ERROR = "error"
        UNANSWERED = "unanswered"

    # Indexed by the unique constraint below, whose first column it is.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    message_seq = models.PositiveIntegerField()
    block_seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    call_id = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "message_seq", "block_seq"], name="finder_mark_unique"
            ),
        ]
        indexes = [
            # Answering a call removes its mark: looked up by the call's id.
            models.Index(
                fields=["conversation", "call_id"],
                condition=Q(kind="unanswered"),
                name="finder_mark_open_call",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} at #{self.message_seq}.{self.block_seq}"
