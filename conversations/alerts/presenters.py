"""A conversation's open alerts as its header shows them (docs/contract.md §11), and the
list row's badge label: pure, from the alerts a view or a socket has fetched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.urls import reverse

KIND_LABELS = {
    "pressure": "Context pressure",
    "tool_error": "Tool error",
    "unanswered": "Unanswered tool call",
    "compaction": "Compaction",
}


class AlertLike(Protocol):
    """An alert as the header lists it (`record.models.Alert`, its rule fetched with it)."""

    @property
    def pk(self) -> Any: ...
    @property
    def seq(self) -> int: ...
    @property
    def detail(self) -> str: ...
    @property
    def fired_at(self) -> datetime: ...
    @property
    def rule(self) -> Any: ...


@dataclass(frozen=True)
class AlertRow:
    id: int
    kind: str
    label: str
    detail: str
    seq: int
    fired_at: str  # ISO 8601, for the page's local-time script
    acknowledge_url: str


@dataclass(frozen=True)
class AlertsPanel:
    open: int
    badge: str  # "2 open alerts"; "" when none are open
    rows: list[AlertRow]
    more: str  # "and 3 more" when more are open than listed
    acknowledge: bool  # whether the reader may acknowledge (the page offers the button)


def badge_label(open_count: int) -> str:
    if not open_count:
        return ""
    return f"{open_count:,} open alert{'s' if open_count != 1 else ''}"


def alerts_panel(
    conversation_id: Any, alerts: Sequence[AlertLike], open_count: int, *, acknowledge: bool
) -> AlertsPanel:
    rows = [
        AlertRow(
            id=a.pk,
            kind=a.rule.kind,
            label=KIND_LABELS.get(a.rule.kind, a.rule.kind),
            detail=a.detail,
            seq=a.seq,
            fired_at=a.fired_at.isoformat(timespec="seconds"),
            acknowledge_url=reverse(
                "alert-acknowledge",
                kwargs={"conversation_id": str(conversation_id), "alert_id": a.pk},
            ),
        )
        for a in alerts
    ]
    more = open_count - len(rows)
    return AlertsPanel(
        open=open_count,
        badge=badge_label(open_count),
        rows=rows,
        more=f"and {more:,} more" if more > 0 else "",
        acknowledge=acknowledge,
    )
