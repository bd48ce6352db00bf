"""Webhook deliveries (docs/contract.md §11), the database side: claiming the due ones (each
attempt by one process: rows locked with SKIP LOCKED and leased), recording each attempt,
scheduling the retry, and an operator's redelivery. The POSTs themselves are made by the
alert loop (conversations/alerts/loop.py), outside any transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations.alerts.models import Delivery, DeliveryAttempt, DeliveryState
from conversations.core import alerts as core
from conversations.record import metrics

CLAIM_BATCH = 20  # deliveries one process sends at once
# A claimed delivery is not claimed again for this long: its attempt (10 s at most) has
# been recorded by then, or its process died and another one retries it (at least once).
LEASE = timedelta(seconds=core.TIMEOUT_SECONDS * 6)


@dataclass(frozen=True, slots=True)
class Claimed:
    """One attempt to make: the delivery, its number, what to send and how to sign it."""

    delivery_id: str
    number: int
    url: str
    body: bytes
    secret: str
    fired_at: datetime


def deliveries_claim(*, now: datetime | None = None, limit: int = CLAIM_BATCH) -> list[Claimed]:
    """Claim the due pending deliveries (at most `limit`): each gets its next attempt's
    number and a lease, in one short transaction, so no other process takes them."""
    now = now or timezone.now()
    with transaction.atomic():
        rows = list(
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("alert__rule")
            .filter(state=DeliveryState.PENDING, next_attempt_at__lte=now)
            .order_by("next_attempt_at")[:limit]
        )
        if not rows:
            return []
        Delivery.objects.filter(pk__in=[row.pk for row in rows]).update(
            attempts=F("attempts") + 1, next_attempt_at=now + LEASE
        )
    return [
        Claimed(
            str(row.pk),
            row.attempts + 1,
            row.url,
            bytes(row.body),
            row.alert.rule.secret,
            row.alert.fired_at,
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt went: the answer's status (None: no answer) and the error ("" for
    a 2xx answer)."""

    claimed: Claimed
    at: datetime
    status_code: int | None
    error: str
    duration_ms: int


def deliveries_attempted(outcomes: Sequence[Outcome]) -> None:
    """Record a batch of attempts in one transaction: a 2xx answer delivers; anything else
    is retried after the next doubling wait, or fails once that would be past 24 hours
    after the alert fired. An attempt whose delivery was deleted meanwhile (with its rule)
    is not recorded: it went with the delivery; the others are."""
    now = timezone.now()
    with transaction.atomic():
        # Locked first: a rule deleted now waits for these to be recorded, one deleted
        # before leaves its deliveries out here (docs/contract.md §11).
        present = {
            str(pk)
            for pk in Delivery.objects.select_for_update()
            .filter(pk__in=[o.claimed.delivery_id for o in outcomes])
            .order_by("pk")
            .values_list("pk", flat=True)
        }
        outcomes = [o for o in outcomes if o.claimed.delivery_id in present]
        DeliveryAttempt.objects.bulk_create(
            DeliveryAttempt(
                delivery_id=o.claimed.delivery_id,
                number=o.claimed.number,
                at=o.at,
                status_code=o.status_code,
                error=core.cut(o.error, core.ERROR_CHARS),
                duration_ms=o.duration_ms,
            )
            for o in outcomes
        )
        for o in outcomes:
            ok = o.status_code is not None and 200 <= o.status_code < 300 and not o.error
            when = None
            if ok:
                state = DeliveryState.DELIVERED
            else:
                when = core.next_attempt(
                    o.claimed.fired_at,
                    o.claimed.number,
                    settings.REPLAY_WEBHOOK_RETRY_SECONDS,
                    now,
                )
                state = DeliveryState.PENDING if when is not None else DeliveryState.FAILED
            Delivery.objects.filter(pk=o.claimed.delivery_id).update(
                state=state, next_attempt_at=when, last_error=core.cut(o.error, core.ERROR_CHARS)
            )
            outcome = "delivered" if ok else str(state)  # "pending": to be retried
            transaction.on_commit(metrics.WEBHOOK_ATTEMPTS.labels(outcome).inc)


def delivery_redeliver(*, delivery: Delivery) -> None:
    """An operator's redelivery: pending again and due now (the same delivery id and body)."""
    from conversations.alerts.services import wake_sender

    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk).update(
            state=DeliveryState.PENDING, next_attempt_at=timezone.now()
        )
        transaction.on_commit(wake_sender)
