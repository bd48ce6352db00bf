"""tokens: split from conversations.record.models."""

from __future__ import annotations

from django.db import models


class ApiToken(models.Model):
    """A service credential; only the SHA-256 digest of the token is kept."""

    label = models.CharField(max_length=200)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=12, editable=False, help_text="First characters, to tell tokens apart."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Optional: refused from then on (create_api_token --expires-in DAYS); empty: never.
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"


class IdempotentResponse(models.Model):
    """The first answer to a POST carrying an Idempotency-Key, replayed on a repeat."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "key"], name="idempotency_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.status}"
