"""What ingest keeps beside the record (docs/contract.md §6): where `manage.py tail` stopped
in a file, which conversation an OTLP trace feeds, and the spans it refused (a day's)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from conversations.record.models.conversation import Conversation


class TailCursor(models.Model):
    """Where `manage.py tail` stopped in one file, and the conversation the file feeds.

    Saved in the same transaction as what it appended, so a restart resumes exactly there.
    """

    path = models.TextField()
    # SHA-256 of the path: a unique index that any path length fits.
    path_digest = models.CharField(max_length=64, unique=True, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="tail_cursors"
    )
    # Just past the last complete line stored; the file's first bytes then (length, digest).
    offset = models.BigIntegerField(default=0)
    head_len = models.PositiveIntegerField(default=0)
    head_digest = models.CharField(max_length=64, blank=True, default="")
    # Informative: the file as last seen (network filesystems and editors change these).
    device = models.BigIntegerField(null=True, blank=True)
    inode = models.BigIntegerField(null=True, blank=True)
    lines = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.CheckConstraint(condition=Q(offset__gte=0), name="tail_cursor_offset_gte_0"),
        ]

    def __str__(self) -> str:
        return f"{self.path} @ {self.offset}"


class TraceConversation(models.Model):
    """The conversation that OTLP spans with this `gen_ai.conversation.id` (else trace id)
    land in."""

    key = models.CharField(max_length=255, unique=True)
    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, related_name="trace_source"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class RejectedSpan(models.Model):
    """An OTLP span that `POST /v1/traces` did not store, and why (kept 24 hours): the list
    page says how many were rejected recently, the admin lists them."""

    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    trace_id = models.CharField(max_length=64)
    span_id = models.CharField(max_length=32)
    reason = models.TextField()

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"span {self.span_id}"
