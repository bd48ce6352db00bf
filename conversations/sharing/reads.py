"""Reads of share links (docs/contract.md §8): by token digest, by id, and a conversation's
links for its share panel."""

from __future__ import annotations

from conversations.record.models.conversation import Conversation
from conversations.sharing.models import ShareLink


def share_get(digest: str) -> ShareLink | None:
    """The link with this token digest, with its conversation (one query)."""
    return ShareLink.objects.select_related("conversation").filter(digest=digest).first()


def share_by_id(share_id: int) -> ShareLink | None:
    return ShareLink.objects.filter(pk=share_id).first()


def share_list(conversation: Conversation) -> list[ShareLink]:
    """A conversation's links, newest first (bounded: a link is made by hand)."""
    return list(ShareLink.objects.filter(conversation=conversation).order_by("-created_at", "-id"))
