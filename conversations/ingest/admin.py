"""Django admin for the ingest slice: the OTLP spans that were not stored, read-only."""

from __future__ import annotations

from django.contrib import admin

from conversations.ingest.models import RejectedSpan
from conversations.record.admin import ReadOnlyMixin, ReplayAdmin


@admin.register(RejectedSpan)
class RejectedSpanAdmin(ReadOnlyMixin, ReplayAdmin[RejectedSpan]):
    """OTLP spans `POST /v1/traces` did not store, and why (the last day's)."""

    list_display = ("received_at", "span_id", "trace_id", "reason")
    search_fields = ("span_id", "trace_id")
