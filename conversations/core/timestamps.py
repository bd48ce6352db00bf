"""The source's own time of a message (docs/contract.md §6): pure (no Django)."""

from __future__ import annotations

from datetime import UTC, datetime

MAX_CHARS = 64  # longer than any ISO 8601 time; a longer value is not parsed


def source_time(metadata: object) -> datetime | None:
    """`metadata.timestamp` (as imports keep it) in UTC when it is ISO 8601 with a zone,
    else None: the page and the export show this time where there is one."""
    if not isinstance(metadata, dict):
        return None
    value = metadata.get("timestamp")
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_CHARS:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        # At the ends of the calendar ("0001-01-01T00:00:00+01:00") UTC is out of range.
        return parsed.astimezone(UTC) if parsed.tzinfo else None
    except (ValueError, OverflowError):
        return None
