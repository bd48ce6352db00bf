"""Reads of alerts (docs/contract.md §11) for the pages, the sockets and the API: each one
query, bounded by a page or by `OPEN_SHOWN`, never by how many alerts are stored."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Count, QuerySet

from conversations.alerts.models import Alert, AlertRule
from conversations.record.models.conversation import Conversation

OPEN_SHOWN = 10  # open alerts listed in a conversation's header (the badge counts them all)
# Acknowledging an alert, on the page or in the admin, is a change to it.
ACKNOWLEDGE_PERMISSION = "conversations.change_alert"


def open_alerts(conversation_id: Any) -> tuple[list[Alert], int]:
    """The conversation's latest open alerts (at most OPEN_SHOWN) and how many are open."""
    found = list(
        Alert.objects.filter(conversation_id=conversation_id, acknowledged_at__isnull=True)
        .select_related("rule")
        .order_by("-fired_at", "-id")[: OPEN_SHOWN + 1]
    )
    if len(found) <= OPEN_SHOWN:
        return found, len(found)
    total = Alert.objects.filter(
        conversation_id=conversation_id, acknowledged_at__isnull=True
    ).count()
    return found[:OPEN_SHOWN], total


def open_alert_counts(conversation_ids: Iterable[Any]) -> dict[Any, int]:
    """How many open alerts each of these conversations (a page of rows) has; absent: 0."""
    ids = list(conversation_ids)
    if not ids:
        return {}
    rows = (
        Alert.objects.filter(conversation_id__in=ids, acknowledged_at__isnull=True)
        .values("conversation_id")
        .annotate(n=Count("id"))
        .values_list("conversation_id", "n")
    )
    return dict(rows)


def with_open_alerts(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """`?alerts=open`: only conversations with an open alert."""
    return conversations.filter(
        pk__in=Alert.objects.filter(acknowledged_at__isnull=True).values("conversation_id")
    )


def alert_get(conversation_id: Any, alert_id: int) -> Alert | None:
    return (
        Alert.objects.filter(pk=alert_id, conversation_id=conversation_id)
        .select_related("rule")
        .first()
    )


def rule_list(limit: int = 200) -> list[AlertRule]:
    return list(AlertRule.objects.order_by("id")[:limit])


def rule_get(rule_id: int) -> AlertRule | None:
    return AlertRule.objects.filter(pk=rule_id).first()
