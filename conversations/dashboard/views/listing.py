"""The conversation list (docs/contract.md §4): a search, filters and a page of rows."""

from __future__ import annotations

from datetime import timedelta

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from conversations.alerts import reads as alert_reads
from conversations.core.list_status import ListFilters
from conversations.core.options import OptionError
from conversations.core.search import MAX_QUERY_CHARS, QueryError
from conversations.dashboard import socket_urls
from conversations.dashboard.presenters.listing import (
    conversation_rows,
    list_empty,
    list_pager,
    list_summary,
    rejected_spans_note,
)
from conversations.ingest import reads as ingest_reads
from conversations.record.models.conversation import Conversation
from conversations.record.notes import reads as note_reads
from conversations.record.search import reads as search_reads
from conversations.web.pages import ADD_PERMISSION, HtmxHttpRequest, bad_request, operator_required

PER_PAGE = 25
REJECTED_SPANS_SHOWN = timedelta(hours=24)


@require_GET
@vary_on_headers("HX-Request")
@operator_required
def conversation_list(request: HtmxHttpRequest) -> HttpResponse:
    q = request.GET.get("q", "").replace("\x00", "").strip()  # a NUL has no place in a page
    try:
        filters = ListFilters.from_query(request.GET)
    except OptionError as exc:
        return bad_request(request, exc.message)
    since = timezone.now().isoformat()  # before the rows are read: the socket's position
    error = ""
    try:
        found = search_reads.conversation_list(
            q=q,
            has_errors=filters.has_errors,
            unanswered=filters.unanswered,
            label=filters.label,
        )
        if filters.alerts_open:
            found = alert_reads.with_open_alerts(found)
    except QueryError as exc:
        found, error = Conversation.objects.none(), exc.message
    paginator = search_reads.CappedPaginator if q else Paginator
    page = paginator(found, PER_PAGE).get_page(request.GET.get("page"))
    conversations = list(page)
    hits = search_reads.search_hits(conversations, q) if q and not error else {}
    context = {
        "page": page,
        "q": q,
        "filters": filters,
        "pager": list_pager(page, q=q, filters=filters),
        "empty": list_empty(q=q, filters=filters),
        "summary": "" if error else list_summary(page, q=q, filters=filters),
        "error": error,
        "max_query": MAX_QUERY_CHARS,
        "rows": conversation_rows(
            conversations,
            hits=hits,
            labels=note_reads.labels_of([c.pk for c in conversations]),
            alerts=alert_reads.open_alert_counts(c.pk for c in conversations),
        ),
        # Only the first page of everything moves with live activity: a row that arrives
        # live is not checked against a search or a filter.
        "live": page.number == 1 and not q and not filters,
        "can_import": request.user.has_perm(ADD_PERMISSION),
        "rejected_spans": rejected_spans_note(
            *ingest_reads.spans_rejected_since(timezone.now() - REJECTED_SPANS_SHOWN)
        ),
        "socket_url": socket_urls.list_socket_url(since),
    }
    partial = request.htmx and not request.htmx.history_restore_request
    template = "conversations/list.html#results" if partial else "conversations/list.html"
    return render(request, template, context, status=400 if error else 200)
