"""Share links (docs/contract.md §8): a token's digest, its scope and its views."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from conversations.core import replay
from conversations.record.models.conversation import Conversation


class ShareLink(models.Model):
    """A read-only link to one conversation (docs/contract.md §8); only the SHA-256 of its token is
    kept.

    `up_to_seq` None: the whole conversation, live; else messages 0..up_to_seq, frozen.
    `vision`/`shape` None: the toggle is free; else fixed. `images` False: images are
    withheld (the projection is then shown with vision off, so it is what is shown).
    """

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="share_links"
    )
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    up_to_seq = models.PositiveIntegerField(null=True, blank=True)
    vision = models.BooleanField(null=True, blank=True)
    shape = models.CharField(max_length=16, blank=True, default="")
    images = models.BooleanField(default=True)
    notes = models.BooleanField(default=False)  # the operators' notes shown (docs/contract.md §10)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    view_count = models.PositiveIntegerField(default=0, editable=False)
    last_viewed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(shape__in=["", *replay.SHAPES]), name="share_link_shape_valid"
            ),
            models.CheckConstraint(
                condition=Q(images=True) | ~Q(vision=True),
                name="share_link_no_vision_without_images",
            ),
        ]

    def __str__(self) -> str:
        return f"share {self.pk} of {self.conversation_id}"

    @property
    def frozen(self) -> bool:
        return self.up_to_seq is not None

    @property
    def toggles_label(self) -> str:
        """What the link fixes, as its lists say it: "vision off, anthropic, no images",
        or "free"."""
        fixed = []
        if self.vision is not None:
            fixed.append(f"vision {'on' if self.vision else 'off'}")
        if self.shape:
            fixed.append(self.shape)
        if not self.images:
            fixed.append("no images")
        if self.notes:
            fixed.append("notes")
        return ", ".join(fixed) or "free"

    def state(self, now: datetime) -> str:
        """The state at `now`: "active", "revoked" or "expired"."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"
