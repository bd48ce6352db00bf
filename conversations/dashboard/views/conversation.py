"""The conversation page (docs/contract.md §4): each message beside its projection, a window
at a time, and what the page fetches on demand: the rest of a text, a message's record or
projection to copy, the downloads and the images.

A page view reads the window (rows, counts, tool rounds) through the record, then hands
it to `presenters.conversation_page`; the share pages reuse these responses."""

from __future__ import annotations

import base64
import dataclasses
import functools
from typing import Any

import orjson
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import push_url

from conversations.alerts.views import alerts_context
from conversations.core import page_windows, replay
from conversations.core.counting import compact
from conversations.core.counting.context_windows import MAX_WINDOW
from conversations.core.options import OptionError, ReplayOptions, ShapeSource
from conversations.dashboard.presenters.conversation import PageRead, conversation_page
from conversations.dashboard.presenters.messages import (
    block_full_text,
    more_blocks,
    with_notes,
    without_images,
)
from conversations.dashboard.views.share_panel import with_shares
from conversations.record import streams
from conversations.record.counting import preview_counts, token_counts
from conversations.record.models.conversation import Conversation
from conversations.record.notes import reads as note_reads
from conversations.record.reads import selectors, shapes
from conversations.record.reads.rows import stored_messages
from conversations.record.search import finder as finder_reads
from conversations.record.services.conversations import conversation_window_set
from conversations.web.pages import (
    HtmxHttpRequest,
    Narrow,
    bad_request,
    conversation_or_404,
    json_response,
    may_share,
    operator_required,
    plain_response,
    unchanged,
    view_query,
    with_options,
)


@require_GET
@vary_on_headers("HX-Request")
@operator_required
@with_options
def conversation_detail(
    request: HtmxHttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    conversation = conversation_or_404(conversation_id)
    # The page counts (and shows) the shape its source was recorded in unless the query
    # names one (docs/contract.md §7); its links and socket then carry that shape.
    counted, shape_source = ReplayOptions.for_counts(request.GET, metadata=conversation.metadata)
    shape = counted.shape
    narrow: Narrow = functools.partial(_with_shape_source, shape_source)
    if may_share(request):
        narrow = functools.partial(with_shares, conversation)
    if request.user.has_perm(CHANGE_PERMISSION):
        narrow = _with_window_form(narrow, conversation)
    narrow = _with_notes_viewer(narrow, request)
    return detail_response(request, conversation, vision=vision, shape=shape, narrow=narrow)


CHANGE_PERMISSION = "conversations.change_conversation"


def _with_shape_source(source: ShapeSource, context: dict[str, Any]) -> dict[str, Any]:
    """Where the counts' shape came from: the query, the source, or the default."""
    return context | {"shape_source": source}


def _with_window_form(narrow: Narrow, conversation: Conversation) -> Narrow:
    """The page's form for the window this conversation counts against (operators who may
    change conversations)."""
    action = reverse("conversation-window", args=[str(conversation.id)])
    value = conversation.metadata.get("context_window", "")
    return lambda context: narrow(context) | {"window_form": {"action": action, "value": value}}


def _with_notes_viewer(narrow: Narrow, request: HttpRequest) -> Narrow:
    """Who is reading, for the notes' controls (docs/contract.md §10): the page's script
    shows edit and delete on this user's notes, delete on all with delete_note."""
    viewer = {
        "user": request.user.pk,
        "add": request.user.has_perm(note_reads.ADD),
        "delete_any": request.user.has_perm(note_reads.DELETE_ANY),
    }
    return lambda context: narrow(context) | {"notes_viewer": viewer}


@require_POST
@operator_required
def conversation_window(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """Set (or, empty, clear) the window a conversation counts against (docs/contract.md
    §7), then back to its page."""
    if not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied
    conversation = conversation_or_404(conversation_id)
    value = request.POST.get("context_window", "").strip().replace(",", "").replace("_", "")
    if value and (not value.isascii() or not value.isdigit() or not 0 < int(value) <= MAX_WINDOW):
        return bad_request(
            request, f"The window must be a whole number of tokens from 1 to {MAX_WINDOW:,}."
        )
    conversation_window_set(conversation=conversation, tokens=int(value) if value else None)
    return redirect(conversation.get_absolute_url())


def page_context(
    conversation: Conversation,
    *,
    window: range,
    vision: bool,
    shape: replay.Shape,
    view: dict[str, str] | None = None,
    earlier: bool = True,
    later: bool = True,
) -> dict[str, Any]:
    """Read the messages at `window` (at most a document of them), the conversation's
    pressure, the rows' margin counts and tool rounds, then present the page's context;
    `view` may override the model and window of the pressure view (OptionError on a bad
    value)."""
    window = range(max(0, window.start), min(window.stop, window.start + page_windows.DOCUMENT))
    rows = selectors.preview_rows(conversation, window)
    total_blocks = selectors.block_total(conversation)
    pressure = token_counts.pressure(
        conversation, ReplayOptions(vision, shape), query=view or {}, total_blocks=total_blocks
    )
    read = PageRead(
        rows=rows,
        total_blocks=total_blocks,
        pressure=pressure,
        counted=token_counts.counted_shown(conversation, pressure, rows),
        pairs=finder_reads.tool_pairs(conversation, rows),
    )
    context = conversation_page(
        conversation,
        read,
        window=window,
        vision=vision,
        shape=shape,
        view=view,
        earlier=earlier,
        later=later,
    )
    notes = note_reads.notes_at(conversation.id, [row.seq for row in rows])
    context["messages"] = with_notes(conversation.id, context["messages"], notes)
    return context


def detail_response(
    request: HttpRequest,
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    narrow: Narrow = unchanged,
    template: str = "conversations/detail.html",
) -> HttpResponse:
    """The conversation page (or, for htmx, its `conversation` partial); `narrow` adjusts
    the context (a share page narrows it to what its link shows)."""
    try:
        context = narrow(
            page_context(
                conversation,
                window=page_windows.tail(conversation.message_count),
                vision=vision,
                shape=shape,
                view=view_query(request),
            )
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    if not context.get("share"):  # operators see the open alerts; share links never
        context["alerts"] = alerts_context(request, conversation.pk)
    htmx = getattr(request, "htmx", None)
    if htmx and not htmx.history_restore_request:
        response = render(request, template + "#conversation", context)
        return push_url(response, context["self_url"])
    return render(request, template, context)


def _seq(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise ValueError(name)
    return int(value)


@require_GET
@operator_required
@with_options
def earlier_messages(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    return window_response(
        request, conversation_or_404(conversation_id), vision=vision, shape=shape
    )


def window_response(
    request: HttpRequest,
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    narrow: Narrow = unchanged,
) -> HttpResponse:
    """One window of messages: `before=SEQ` (or back to `from`, at most a document), `after=SEQ`,
    or `around=SEQ` (a deep link's target), with controls for the windows beside it."""
    total = conversation.message_count
    try:
        before, start, after, around = (
            _seq(request, name) for name in ("before", "from", "after", "around")
        )
    except ValueError:
        return bad_request(
            request,
            "before, from, after and around must be message numbers (give one of before, "
            "after and around).",
        )
    # A window loaded before (after) the page's replaces its "earlier" ("later") control.
    earlier = later = True
    if before is not None:
        later = False
        before = min(before, total)
        window = page_windows.before(before)
        if start is not None:
            # Back to a deep link's target, at most a document's worth.
            window = range(max(before - page_windows.DOCUMENT, 0, min(start, before)), before)
    elif after is not None:
        earlier = False
        window = page_windows.after(after, total)
    elif around is not None:
        window = page_windows.around(around, total)
    else:
        return bad_request(request, "before, after or around is required.")
    try:
        context = narrow(
            page_context(
                conversation,
                window=window,
                vision=vision,
                shape=shape,
                earlier=earlier,
                later=later,
                view=view_query(request),
            )
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/detail.html#window", context)


@require_GET
@operator_required
def block_text(request: HttpRequest, conversation_id: str, seq: int, block: int) -> HttpResponse:
    return block_text_response(conversation_or_404(conversation_id), seq, block)


def block_text_response(conversation: Conversation, seq: int, block: int) -> HttpResponse:
    """The whole text of one block, as plain text (what a page shows the start of); the
    block alone is read, not its message."""
    found = selectors.block_row(conversation, seq, block)
    if found is None or found.type == "image":
        raise Http404("No such text block.")
    return plain_response(block_full_text(found))


@require_GET
@operator_required
def message_blocks(request: HttpRequest, conversation_id: str, seq: int) -> HttpResponse:
    return message_blocks_response(request, conversation_or_404(conversation_id), seq)


def message_blocks_response(
    request: HttpRequest,
    conversation: Conversation,
    seq: int,
    *,
    images: bool = True,
) -> HttpResponse:
    """The next blocks of a message's record side from `?from=` (docs/contract.md §4
    Bounds): the fragment its "Load more blocks" button inserts, with the next button;
    `images=False` withholds the images' URLs (a share link without images)."""
    try:
        start = _seq(request, "from")
    except ValueError:
        return bad_request(request, "from must be a block number.")
    # A path's number is unbounded: past the record it names no message (and no SQL integer).
    if not 0 <= seq < conversation.message_count:
        raise Http404("No such message or block.")
    rows = selectors.preview_rows(conversation, [seq], blocks_from=start or 0)
    if start is None or not rows or start >= rows[0].block_count:
        raise Http404("No such message or block.")
    more = more_blocks(conversation.id, rows[0], start)
    if not images:
        more = dataclasses.replace(more, blocks=without_images(more.blocks))
    return render(request, "conversations/detail.html#more-blocks", {"more": more})


@require_GET
@operator_required
@with_options
def wire_text(
    request: HttpRequest, conversation_id: str, seq: int, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    return wire_text_response(
        request, conversation_or_404(conversation_id), seq, vision=vision, shape=shape
    )


def wire_text_response(
    request: HttpRequest,
    conversation: Conversation,
    seq: int,
    *,
    vision: bool,
    shape: replay.Shape,
) -> HttpResponse:
    """One message's whole wire text for these toggles (or its text part `part`), as text."""
    message = selectors.message_full(conversation, seq)
    if message is None:
        raise Http404("No such message.")
    (stored,) = stored_messages([message])
    content = replay.project_message(stored, vision=vision, shape=shape)["content"]
    part = request.GET.get("part")
    if isinstance(content, str):
        return plain_response(content)
    texts = {str(i): p["text"] for i, p in enumerate(content) if p["type"] == "text"}
    if part not in texts:
        return bad_request(request, "part must name a text part of this message.")
    return plain_response(texts[part])


@require_GET
@operator_required
def message_record(request: HttpRequest, conversation_id: str, seq: int) -> HttpResponse:
    """One stored message exactly as GET /api/conversations/ID lists it (the page's "Copy
    record JSON"; fetched on click, so a page never carries a message's whole record)."""
    message = selectors.message_full(conversation_or_404(conversation_id), seq)
    if message is None:
        raise Http404("No such message.")
    return json_response(orjson.dumps(shapes.message_data(message, message.blocks)))


@require_GET
@operator_required
@with_options
def message_projection(
    request: HttpRequest, conversation_id: str, seq: int, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    return message_projection_response(
        conversation_or_404(conversation_id), seq, vision=vision, shape=shape
    )


def message_projection_response(
    conversation: Conversation, seq: int, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """One message's wire message for these toggles, as the projection gives it (the page's
    "Copy projection"): `{"role", "content"}`, the system role kept in either shape."""
    message = selectors.message_full(conversation, seq)
    if message is None:
        raise Http404("No such message.")
    (stored,) = stored_messages([message])
    return json_response(orjson.dumps(replay.project_message(stored, vision=vision, shape=shape)))


@require_GET
@operator_required
@with_options
def replay_download(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponseBase:
    """The same bytes as GET /api/conversations/ID/replay (from the last stored boundary, or
    `?compact=`), for a signed-in operator."""
    conversation = conversation_or_404(conversation_id)
    try:
        policy = compact.payload_policy(request.GET, conversation.metadata)
    except OptionError as exc:
        return bad_request(request, exc.message)
    result = preview_counts.payload_result(conversation, ReplayOptions(vision, shape), policy)
    pieces = streams.replay_pieces(
        conversation, vision=vision, shape=shape, stop=conversation.message_count, result=result
    )
    response = streams.StreamedResponse(pieces, content_type="application/json")
    suffix = f"-{policy.name}" if policy is not None else ""
    name = f"replay-{conversation.id}-{shape}-vision-{'on' if vision else 'off'}{suffix}.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
@operator_required
@with_options
def markdown_download(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponseBase:
    """The same Markdown as GET /api/conversations/ID/markdown, as a file to save."""
    conversation = conversation_or_404(conversation_id)
    try:
        policy = compact.payload_policy(request.GET, conversation.metadata)
    except OptionError as exc:
        return bad_request(request, exc.message)
    result = preview_counts.payload_result(conversation, ReplayOptions(vision, shape), policy)
    pieces = streams.markdown_pieces(
        conversation, vision=vision, shape=shape, stop=conversation.message_count, result=result
    )
    response = streams.StreamedResponse(pieces, content_type="text/markdown; charset=utf-8")
    name = f"conversation-{conversation.id}-{shape}-vision-{'on' if vision else 'off'}.md"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def download_response(
    conversation: Conversation, *, vision: bool, shape: replay.Shape, stop: int | None = None
) -> HttpResponseBase:
    """The projection as an attachment (of the messages before `stop`, when given)."""
    count = conversation.message_count
    pieces = streams.replay_pieces(
        conversation, vision=vision, shape=shape, stop=count if stop is None else min(stop, count)
    )
    response = streams.StreamedResponse(pieces, content_type="application/json")
    name = f"replay-{conversation.id}-{shape}-vision-{'on' if vision else 'off'}.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
@operator_required
def block_image(request: HttpRequest, conversation_id: str, seq: int, block: int) -> HttpResponse:
    return image_response(conversation_or_404(conversation_id), seq, block)


def image_response(conversation: Conversation, seq: int, block: int) -> HttpResponse:
    """An image block's bytes, as the raster type it was validated as; never SVG or HTML."""
    found = selectors.image_block(conversation, seq, block)
    if found is None:
        raise Http404("No such image.")
    media_type, data = found
    response = HttpResponse(base64.b64decode(data), content_type=media_type)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=86400, immutable"
    return response
