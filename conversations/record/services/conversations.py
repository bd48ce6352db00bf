"""Conversations as wholes: create, describe, delete (with all they hold) and prune;
`lock_conversation`, the row lock every write into a conversation holds."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from conversations.record import events
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.search import FinderMark, SearchEntry
from conversations.record.services.search_entries import index_title


def conversation_create(*, title: str, metadata: dict[str, Any] | None = None) -> Conversation:
    """Create an empty conversation; broadcasts conversation.created on commit."""
    with transaction.atomic():
        conversation = Conversation.objects.create(title=title, metadata=metadata or {})
        index_title(conversation)
        events.publish_on_commit(
            {"type": "conversation.created", "conversation_id": str(conversation.id)}
        )
    return conversation


def conversation_update(
    *, conversation: Conversation, title: str, metadata: dict[str, Any]
) -> Conversation:
    """Change what describes a conversation (never its messages)."""
    with transaction.atomic():
        conversation.title = title
        conversation.metadata = metadata
        conversation.save(update_fields=["title", "metadata", "updated_at"])
        index_title(conversation)
    return conversation


def conversation_window_set(*, conversation: Conversation, tokens: int | None) -> Conversation:
    """Count this conversation against a window of `tokens` (None: its model's window),
    kept in its metadata as `context_window` (docs/contract.md §7)."""
    with transaction.atomic():
        locked = lock_conversation(conversation)
        metadata = {k: v for k, v in locked.metadata.items() if k != "context_window"}
        if tokens is not None:
            metadata["context_window"] = tokens
        return conversation_update(conversation=locked, title=locked.title, metadata=metadata)


def conversation_delete(*, conversation: Conversation) -> tuple[int, int]:
    """Delete a conversation with its messages and blocks, whole or not at all; returns
    (messages, blocks) deleted. Broadcasts conversation.deleted on commit."""
    with transaction.atomic():
        locked = lock_conversation(
            conversation
        )  # no append can land in a half-deleted conversation
        # Children first, each in one statement: the collector would load every message.
        blocks, _ = Block.objects.filter(message__conversation=locked).delete()
        # Its search entries too (on SQLite the FTS5 index follows by trigger).
        SearchEntry.objects.filter(conversation=locked).delete()
        FinderMark.objects.filter(conversation=locked).delete()
        messages, _ = Message.objects.filter(conversation=locked).only("pk").delete()
        Conversation.objects.filter(pk=locked.pk).delete()
        events.publish_on_commit(
            {"type": "conversation.deleted", "conversation_id": str(locked.id)}
        )
    return messages, blocks


def conversations_prune(
    *, older_than: timedelta, dry_run: bool = False
) -> list[tuple[uuid.UUID, str]]:
    """Delete (unless `dry_run`) every conversation without activity for `older_than`,
    one transaction each through conversation_delete; returns their (id, title)."""
    cutoff = timezone.now() - older_than
    stale = list(
        Conversation.objects.filter(updated_at__lt=cutoff)
        .order_by("updated_at", "id")
        .values_list("id", "title")
    )
    if not dry_run:
        for pk, _title in stale:
            # Activity since the list was read keeps a conversation (it is no longer stale).
            found = Conversation.objects.filter(pk=pk, updated_at__lt=cutoff).first()
            if found is not None:
                conversation_delete(conversation=found)
    return stale


def lock_conversation(conversation: Conversation) -> Conversation:
    # select_for_update locks the row on PostgreSQL; SQLite's IMMEDIATE transactions
    # already hold the database write lock from BEGIN.
    return Conversation.objects.select_for_update().get(pk=conversation.pk)
