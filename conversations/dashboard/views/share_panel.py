"""The conversation page's share panel (docs/contract.md §8), read and presented: the
conversation page and the share form both show it."""

from __future__ import annotations

from typing import Any

from conversations.record.models.conversation import Conversation
from conversations.sharing import reads as sharing_reads
from conversations.sharing.presenters import shares_panel


def shares_context(conversation: Conversation, **extra: Any) -> dict[str, Any]:
    """The `shares` partial's context: the conversation's links, read, then presented."""
    return shares_panel(conversation, sharing_reads.share_list(conversation), **extra)


def with_shares(
    conversation: Conversation, context: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return context | shares_context(conversation, **extra)
