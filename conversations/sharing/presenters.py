"""The conversation page's share panel (docs/contract.md §8): the form and the
conversation's links, never their tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone

from conversations.web.protocols import ConversationLike, ShareLinkLike

EXPIRY_CHOICES = [
    ("3600", "in 1 hour"),
    ("86400", "in 1 day"),
    ("259200", "in 3 days"),
    ("604800", "in 7 days"),
    ("1209600", "in 14 days"),
    ("2592000", "in 30 days"),
    ("", "never"),
]


@dataclass(frozen=True)
class ShareRow:
    id: int
    created_at: datetime
    scope: str
    toggles: str
    expires_at: datetime | None
    view_count: int
    last_viewed_at: datetime | None
    state: str
    revoke_url: str


def share_rows(conversation: ConversationLike, links: Sequence[ShareLinkLike]) -> list[ShareRow]:
    """The conversation page's list of its share links (never their tokens)."""
    now = timezone.now()
    rows = []
    for link in links:
        rows.append(
            ShareRow(
                id=link.pk,
                created_at=link.created_at,
                scope="live, whole"
                if link.up_to_seq is None
                else f"frozen, #0 to #{link.up_to_seq}",
                toggles=link.toggles_label,
                expires_at=link.expires_at,
                view_count=link.view_count,
                last_viewed_at=link.last_viewed_at,
                state=link.state(now),
                revoke_url=reverse("share-revoke", args=[str(conversation.id), link.pk]),
            )
        )
    return rows


def shares_panel(
    conversation: ConversationLike, links: Sequence[ShareLinkLike], **extra: Any
) -> dict[str, Any]:
    """The context of the page's `shares` partial: the form and the conversation's links
    (`sharing_reads.share_list`)."""
    return {
        "conversation": conversation,
        "can_share": True,
        "share_rows": share_rows(conversation, links),
        "shares_url": reverse("share-create", args=[str(conversation.id)]),
        "expiry_choices": EXPIRY_CHOICES,
        "last_seq_stored": max(conversation.message_count - 1, 0),
    } | extra
