"""A share link as the API answers with it (docs/contract.md §8): never its token."""

from __future__ import annotations

from typing import Any

from conversations.sharing.models import ShareLink


def share_data(link: ShareLink) -> dict[str, Any]:
    """A link as the API lists it: its scope, expiry and views, never its token."""
    return {
        "id": link.pk,
        "conversation_id": str(link.conversation_id),
        "up_to_seq": link.up_to_seq,
        "vision": link.vision,
        "shape": link.shape or None,
        "images": link.images,
        "notes": link.notes,
        "created_at": link.created_at,
        "expires_at": link.expires_at,
        "revoked_at": link.revoked_at,
        "view_count": link.view_count,
        "last_viewed_at": link.last_viewed_at,
    }
