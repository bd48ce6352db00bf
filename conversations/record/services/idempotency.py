"""The answers kept for the API's Idempotency-Keys, and their expiry."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from conversations.record.models.tokens import ApiToken, IdempotentResponse

IDEMPOTENCY_TTL = timedelta(hours=48)


def idempotent_response_save(
    *, token: ApiToken, key: str, fingerprint: str, status: int, body: bytes
) -> None:
    """Keep a POST's first answer (inside the POST's transaction) and forget expired ones."""
    IdempotentResponse.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_TTL).delete()
    IdempotentResponse.objects.create(
        token=token, key=key, fingerprint=fingerprint, status=status, body=body
    )
