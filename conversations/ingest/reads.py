"""Reads of the ingest slice: `manage.py tail`'s cursor for a file, and the OTLP spans
`POST /v1/traces` rejected lately (the list page's notice)."""

from __future__ import annotations

import hashlib
from datetime import datetime

from conversations.ingest.models import RejectedSpan, TailCursor


def tail_cursor(path: str) -> TailCursor | None:
    """The cursor `manage.py tail` keeps for a file (by its resolved path)."""
    digest = hashlib.sha256(path.encode()).hexdigest()
    return TailCursor.objects.select_related("conversation").filter(path_digest=digest).first()


def spans_rejected_since(since: datetime, *, shown: int = 3) -> tuple[int, list[RejectedSpan]]:
    """How many OTLP spans were rejected since `since`, and the latest `shown` of them (the
    table holds at most a day's, and at most `ingest.following.REJECTIONS_MAX` rows)."""
    rows = RejectedSpan.objects.filter(received_at__gte=since)
    latest = list(rows.order_by("-received_at", "-id")[:shown])
    # The list page asks on every load: with nothing rejected, one query, no count.
    count = len(latest) if len(latest) < shown else rows.count()
    return count, latest
