"""API tokens: created with the clear token shown once (only its SHA-256 is kept), revoked,
deleted; `token_digest` digests share links' tokens too."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.utils import timezone

from conversations.record.models.tokens import ApiToken


def api_token_create(*, label: str, expires_in: timedelta | None = None) -> tuple[ApiToken, str]:
    """Create a token, refused after `expires_in` when given; the clear token is returned
    once and only its SHA-256 is kept."""
    clear = f"rpl_{secrets.token_urlsafe(32)}"
    expires_at = timezone.now() + expires_in if expires_in is not None else None
    token = ApiToken.objects.create(
        label=label, digest=token_digest(clear), prefix=clear[:8], expires_at=expires_at
    )
    return token, clear


def api_token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def api_token_delete(*, token: ApiToken) -> None:
    """Delete a token (with the answers kept for its Idempotency-Keys): for a temporary
    token that nobody needs listed once its work is done."""
    ApiToken.objects.filter(pk=token.pk).delete()


def token_digest(clear: str) -> str:
    return hashlib.sha256(clear.encode()).hexdigest()
