"""The comparison of two runs (docs/contract.md §9) and its picker: the view aligns and
reads through `compare.reads`, folds the page's rows, reads the texts of the rows it
shows, and hands them to the presenter."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from conversations.compare import presenters as presenter
from conversations.compare import reads as comparing
from conversations.core import compare as compare_core
from conversations.core import replay
from conversations.core.options import ReplayOptions
from conversations.core.search import QueryError
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors
from conversations.web.pages import bad_request, operator_required, with_options


class _Refused(Exception):
    def __init__(self, response: HttpResponse) -> None:
        self.response = response


def _conversation(request: HttpRequest, field: str) -> Conversation:
    """`?a=` or `?b=`: a 400 page when malformed, a 404 page when unknown, naming it."""
    value = request.GET.get(field, "").strip()
    try:
        uuid.UUID(value)
    except ValueError:
        message = f"{field} must be a conversation id (a UUID)."
        raise _Refused(bad_request(request, message)) from None
    found = selectors.conversation_get(value)
    if found is None:
        message = f"Conversation {field} ({value}) was not found."
        raise _Refused(render(request, "404.html", {"message": message}, status=404))
    return found


def _number(request: HttpRequest, name: str, least: int) -> int | None:
    value = request.GET.get(name, "")
    if value == "":
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 9 or int(value) < least:
        raise _Refused(bad_request(request, f"{name} must be a whole number from {least}."))
    return int(value)


@require_GET
@operator_required
@with_options
def compare_runs(request: HttpRequest, *, vision: bool, shape: replay.Shape) -> HttpResponse:
    """`/compare/?a=ID&b=ID`: the two runs aligned, opening on the page of the first
    divergence; without `b`, the picker for `a`."""
    try:
        if not request.GET.get("a", "").strip():
            return bad_request(request, "a is required: the id of the conversation to compare.")
        a = _conversation(request, "a")
        if not request.GET.get("b", "").strip():
            return _pick(request, a)
        b = _conversation(request, "b")
        page = _number(request, "page", 1)
        unfolded = _number(request, "open", 0)  # a row number
    except _Refused as refused:
        return refused.response
    options = ReplayOptions(vision, shape)
    try:
        found = comparing.compared(a, b, options, page=page)
    except comparing.PageError as exc:
        return render(request, "404.html", {"message": str(exc)}, status=404)
    items = compare_core.fold(found.first_row, found.rows, found.same, unfolded=unfolded)
    shown = [item for item in items if isinstance(item, compare_core.Shown)]
    texts = (
        comparing.texts(a, (i.a_seq for i in shown if i.a_seq is not None), options),
        comparing.texts(b, (i.b_seq for i in shown if i.b_seq is not None), options),
    )
    tokens = {found.first_row + k: pair for k, pair in enumerate(found.tokens)}
    read = presenter.CompareRead(
        a=a,
        b=b,
        options=options,
        summaries=(found.a.summary, found.b.summary),
        first_divergence=found.first_divergence,
        first_divergence_row=found.first_divergence_row,
        changed=found.changed,
        minimal=found.alignment.minimal,
        page=found.page,
        pages=found.alignment.pages,
        total_rows=found.alignment.total_rows,
        items=items,
        tokens=tokens,
        texts=texts,
    )
    return render(request, "conversations/compare.html", presenter.compare_page(read))


def _pick(request: HttpRequest, a: Conversation) -> HttpResponse:
    q = request.GET.get("q", "")
    if len(q) > 200 or "\x00" in q:
        return bad_request(request, "q must be at most 200 characters, without NUL.")
    try:
        nearby, label, found = comparing.candidates(a, q)
    except QueryError as exc:
        return bad_request(request, exc.message)
    context = presenter.pick_page(a, q=q, nearby=nearby, nearby_label=label, found=found)
    return render(request, "conversations/compare_pick.html", context)
