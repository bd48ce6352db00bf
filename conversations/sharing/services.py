"""Share links (docs/contract.md §8): created with a token shown once, revoked (closing
their sockets on commit), counted when viewed."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations.core import replay
from conversations.record import events
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation
from conversations.record.services.api_tokens import token_digest
from conversations.sharing.models import ShareLink

SHARE_TOKEN_BYTES = 32  # 256 random bits (docs/contract.md §8 asks for at least 128)
SHARE_MAX_EXPIRY = timedelta(days=30)
SHARE_DEFAULT_EXPIRY = timedelta(days=7)


def share_create(
    *,
    conversation: Conversation,
    created_by: Any = None,
    up_to_seq: int | None = None,
    expires_in: timedelta | None = SHARE_DEFAULT_EXPIRY,
    vision: bool | None = None,
    shape: str | None = None,
    images: bool = True,
    notes: bool = False,
) -> tuple[ShareLink, str]:
    """Create a share link; the clear token is returned once, only its SHA-256 is kept.

    `up_to_seq` must name a stored message; `expires_in` runs from 1 s to 30 days (None:
    never); a link without images cannot fix vision on; `notes`: the operators' notes are
    shown (docs/contract.md §10). Raises IngestError naming the field.
    """
    if up_to_seq is not None and not 0 <= up_to_seq < conversation.message_count:
        last = conversation.message_count - 1
        raise IngestError(
            "up_to_seq",
            f"must name a stored message (0 to {last})"
            if last >= 0
            else "cannot freeze a conversation with no messages",
        )
    if expires_in is not None and not timedelta(seconds=1) <= expires_in <= SHARE_MAX_EXPIRY:
        raise IngestError("expires_in", "must be from 1 second up to 30 days, or null for none")
    if shape is not None and shape not in replay.SHAPES:
        raise IngestError("shape", f"must be one of {', '.join(replay.SHAPES)}, or null (free)")
    if vision and not images:
        raise IngestError("images", "a link without images cannot fix vision on")
    clear = secrets.token_urlsafe(SHARE_TOKEN_BYTES)
    link = ShareLink.objects.create(
        conversation=conversation,
        digest=token_digest(clear),
        created_by=created_by,
        up_to_seq=up_to_seq,
        vision=vision,
        shape=shape or "",
        images=images,
        notes=notes,
        expires_at=timezone.now() + expires_in if expires_in is not None else None,
    )
    return link, clear


def share_revoke(*, link: ShareLink) -> None:
    """Revoke a link (once); broadcasts share.revoked on commit, closing its sockets."""
    with transaction.atomic():
        updated = ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if updated:
            events.share_revoked_on_commit(link.pk)
    link.refresh_from_db(fields=["revoked_at"])


def share_viewed(*, link: ShareLink) -> None:
    """Count one view of a share page (a page load, not its images or downloads)."""
    ShareLink.objects.filter(pk=link.pk).update(
        view_count=F("view_count") + 1, last_viewed_at=timezone.now()
    )
