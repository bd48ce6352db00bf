"""The conversation list: its rows (with a search's hit), the pager and what it says when
nothing is found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page
from django.utils import timezone
from django.utils.timesince import timesince

from conversations.alerts.presenters import badge_label
from conversations.core.counting import next_request as nr
from conversations.core.list_status import ListFilters
from conversations.record.reads.rows import SearchHit, conversation_model
from conversations.web.protocols import ConversationLike


def ago(when: datetime, now: datetime) -> str:
    """ "just now" within a minute, else "3 hours ago" (the largest unit only); the page's
    script keeps it current and says it in the viewer's zone on hover."""
    if (now - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when, now).split(',')[0]} ago"


@dataclass(frozen=True)
class ConversationRow:
    conversation: ConversationLike
    url: str
    relative: str
    exact: str
    unanswered: bool
    model: str = ""  # the latest message's model, else the conversation's own
    messages: str = "0"  # the message count with thousands separators
    errors: str = ""  # the error results' count with separators; "" for none
    compactions: str = ""  # "2 compactions" when compaction boundaries are stored
    alerts: str = ""  # "2 open alerts" (docs/contract.md §11); "" for none
    # With a search: the first matching block's message link and text around the match.
    hit_url: str = ""
    hit_label: str = ""
    snippet: str = ""
    labels: Sequence[str] = ()  # its notes' labels (docs/contract.md §10)


def list_query(*, q: str, filters: ListFilters, page: int | None = None) -> str:
    """The list's query string for this search, these filters and `page` ("?…")."""
    query = {"q": q} | filters.query() | ({"page": str(page)} if page else {})
    return "?" + urlencode(query)


@dataclass(frozen=True)
class Pager:
    newer: str  # the newer page's URL query, or ""
    older: str
    label: str


def list_pager(page: Page[Any], *, q: str, filters: ListFilters) -> Pager | None:
    """Links to the newer and older pages, keeping the search and the filters; None when
    there is only one page."""
    if page.paginator.num_pages <= 1:
        return None
    newer = page.previous_page_number() if page.has_previous() else None
    older = page.next_page_number() if page.has_next() else None
    return Pager(
        newer=list_query(q=q, filters=filters, page=newer) if newer else "",
        older=list_query(q=q, filters=filters, page=older) if older else "",
        # A search's count stops at a cap (`search_reads.CappedPaginator`): "of 40+".
        label=f"Page {page.number:,} of {page.paginator.num_pages:,}"
        + ("+" if getattr(page.paginator, "capped", False) else ""),
    )


def list_empty(*, q: str, filters: ListFilters) -> str:
    """What the list says when nothing is found (the template escapes it)."""
    if q and filters:
        return f"No conversation matches “{q}” with these filters."
    if q:
        return f"No conversation matches “{q}”."
    if filters:
        return "No conversation matches these filters."
    return "No conversations yet. Post one to the API (see the README)."


def list_summary(page: Page[Any], *, q: str, filters: ListFilters) -> str:
    """What the page's status region says when a search or a filter changes the list
    ("12 conversations match “disk”"); a search's count stops at its cap ("1,000+")."""
    count = page.paginator.count
    if not count:
        return list_empty(q=q, filters=filters)
    number = f"{count:,}" + ("+" if getattr(page.paginator, "capped", False) else "")
    noun = "conversation" if count == 1 and not number.endswith("+") else "conversations"
    if q:
        verb = "matches" if noun == "conversation" else "match"
        return f"{number} {noun} {verb} “{q}”" + (" with these filters" if filters else "")
    if filters:
        verb = "matches" if noun == "conversation" else "match"
        return f"{number} {noun} {verb} these filters"
    return f"{number} {noun}"


def _compactions(metadata: object) -> str:
    count = len(nr.boundary_marks(metadata))
    return f"{count:,} compaction{'s' if count != 1 else ''}" if count else ""


def conversation_rows(
    conversations: Sequence[ConversationLike],
    *,
    hits: Mapping[Any, SearchHit] | None = None,
    labels: Mapping[Any, Sequence[str]] | None = None,
    alerts: Mapping[Any, int] | None = None,
) -> list[ConversationRow]:
    """List rows, with whether each conversation's last message ends in unanswered tool
    calls, its model and error count (all read from its row) and, for a search, where in
    the conversation it matched (`hits`: `search_reads.search_hits`, by conversation id), its
    notes' labels (`labels`: `note_reads.labels_of`) and its open alerts (`alerts`:
    `alert_reads.open_alert_counts`)."""
    hits = hits or {}
    labels = labels or {}
    alerts = alerts or {}
    now = timezone.now()
    rows = []
    for c in conversations:
        hit = hits.get(c.id)
        rows.append(
            ConversationRow(
                conversation=c,
                url=c.get_absolute_url(),
                relative=ago(c.updated_at, now),
                exact=c.updated_at.isoformat(timespec="seconds"),
                unanswered=c.unanswered_calls > 0,
                model=conversation_model(c),
                messages=f"{c.message_count:,}",
                errors=f"{c.error_count:,}" if c.error_count else "",
                compactions=_compactions(c.metadata),
                alerts=badge_label(alerts.get(c.id, 0)),
                hit_url=f"{c.get_absolute_url()}#m-{hit.message_seq}" if hit else "",
                hit_label=(
                    f"note on message {hit.message_seq}"
                    if hit.note
                    else f"message {hit.message_seq}"
                )
                if hit
                else "",
                snippet=hit.snippet if hit else "",
                labels=labels.get(c.id, ()),
            )
        )
    return rows


REASON_SHOWN = 200  # characters of a rejection's reason on the list page


def rejected_spans_note(count: int, latest: Sequence[Any]) -> str:
    """What the list page says about OTLP spans rejected in the last day, or ""."""
    if not count:
        return ""
    spans = f"{count:,} OpenTelemetry span{'s' if count != 1 else ''}"
    note = f"{spans} rejected by POST /v1/traces in the last 24 hours"
    if latest:
        reason = latest[0].reason
        cut = reason if len(reason) <= REASON_SHOWN else reason[:REASON_SHOWN] + "…"
        note += f"; the latest, span {latest[0].span_id}: {cut}"
    return note
