"""Alerts (docs/contract.md §11): the rules an operator sets, the episodes they open, the
clock that fires `unanswered`, and the signed webhook deliveries with their attempts.

Part of the record; `conversations.record.models` re-exports every model here.
"""

import uuid

from django.db import models
from django.db.models import Q


class AlertKind(models.TextChoices):
    PRESSURE = "pressure"
    TOOL_ERROR = "tool_error"
    UNANSWERED = "unanswered"
    COMPACTION = "compaction"


class AlertRule(models.Model):
    """What an operator wants to hear about, and where to POST it (docs/contract.md §11).

    `secret` signs the webhook's body (HMAC-SHA256); it is kept in clear because signing
    needs it, and shown once, when the rule is made."""

    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    threshold_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    after_seconds = models.PositiveIntegerField(null=True, blank=True)
    match = models.CharField(max_length=200, blank=True, default="")
    webhook_url = models.CharField(max_length=2000, blank=True, default="")
    secret = models.CharField(max_length=64, editable=False)
    created_by = models.CharField(max_length=200, blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["pressure", "tool_error", "unanswered", "compaction"]),
                name="alert_rule_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"rule {self.pk}: {self.kind}" + (f" on {self.match!r}" if self.match else "")


class Alert(models.Model):
    """One episode of a rule on a conversation: fired at message `seq`, open until an
    operator acknowledges it. `ended_at` is when the episode ended (the rule re-armed); at
    most one episode of a rule per conversation is running, and one alert per seq."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="alerts"
    )
    seq = models.PositiveIntegerField()
    detail = models.CharField(max_length=500)
    fired_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-fired_at", "-id"]
        indexes = [
            models.Index(
                fields=["conversation"],
                condition=Q(acknowledged_at__isnull=True),
                name="alert_open_by_conversation",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "conversation"],
                condition=Q(ended_at__isnull=True),
                name="alert_one_running_episode",
            ),
            models.UniqueConstraint(
                fields=["rule", "conversation", "seq"], name="alert_one_per_seq"
            ),
        ]

    def __str__(self) -> str:
        return f"alert {self.pk}: {self.detail}"


class AlertTimer(models.Model):
    """An `unanswered` rule's clock on a conversation: due when its open tool call has had
    no result for the rule's `after_seconds` (the server's alert loop reads the due ones)."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="+"
    )
    seq = models.PositiveIntegerField()
    due_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "conversation"], name="alert_timer_unique"),
        ]

    def __str__(self) -> str:
        return f"timer of rule {self.rule_id} on {self.conversation_id}"


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # retried for 24 hours, then given up


class Delivery(models.Model):
    """One alert's webhook: its body is fixed when the alert fires, so every attempt sends
    the same bytes under the same `X-Replay-Delivery` (its id)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    url = models.CharField(max_length=2000)
    body = models.BinaryField()
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="delivery_pending_due",
            ),
        ]

    def __str__(self) -> str:
        return f"delivery {self.id}"


class DeliveryAttempt(models.Model):
    """One POST of a delivery: when, the answer's status (None: no answer), the error."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempts_made")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="delivery_attempt_once"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"
