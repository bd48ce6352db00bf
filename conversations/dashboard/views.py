"""The dashboard (docs/contract.md §4): the conversation list and each message beside its projection."""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias
from urllib.parse import unquote

import orjson
from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import RequestDataTooBig
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import push_url
from django_htmx.middleware import HtmxDetails

from conversations.core import compact, importers, page_windows, replay
from conversations.core.compact import Policy
from conversations.core.finder import Cursor, FindError, parse_cursor, parse_kind
from conversations.core.list_status import ListFilters
from conversations.core.options import OptionError, ReplayOptions
from conversations.core.search import MAX_QUERY_CHARS, QueryError
from conversations.dashboard import presenters, socket_urls
from conversations.record import finder_reads, selectors, services, shapes, token_counts
from conversations.record.models import Conversation

View: TypeAlias = Callable[..., HttpResponse]


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


PER_PAGE = 25
PERMISSION = "conversations.view_conversation"


def operator_required(view: View) -> View:
    """Signed in (else the login page) with view_conversation (else 403)."""
    return login_required(permission_required(PERMISSION, raise_exception=True)(view))


def _conversation(conversation_id: str) -> Conversation:
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        raise Http404("No such conversation.")
    return conversation


def bad_request(request: HttpRequest, message: str) -> HttpResponse:
    """A 400 page rendered from its template, so the message (which may quote the
    request) is escaped, and the page runs no htmx (issue 7)."""
    return render(request, "400.html", {"message": message}, status=400)


def _options(view: View) -> View:
    """Parse ?vision= and ?shape= as the API does; a bad value is a 400 page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            options = ReplayOptions.from_query(request.GET)
        except OptionError as exc:
            return bad_request(request, exc.message)
        return view(request, *args, vision=options.vision, shape=options.shape, **kwargs)

    return wrapper


def view_query(request: HttpRequest) -> dict[str, str]:
    """The pressure view's overrides, `?model=` and `?window=` (validated where used)."""
    return {k: request.GET[k] for k in ("model", "window") if k in request.GET}


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
        found = selectors.conversation_list(
            q=q, has_errors=filters.has_errors, unanswered=filters.unanswered
        )
    except QueryError as exc:
        found, error = Conversation.objects.none(), exc.message
    page = Paginator(found, PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "q": q,
        "filters": filters,
        "pager": presenters.list_pager(page, q=q, filters=filters),
        "empty": presenters.list_empty(q=q, filters=filters),
        "error": error,
        "max_query": MAX_QUERY_CHARS,
        "rows": presenters.conversation_rows(list(page), q="" if error else q),
        # Only the first page of everything moves with live activity: a row that arrives
        # live is not checked against a search or a filter.
        "live": page.number == 1 and not q and not filters,
        "can_import": request.user.has_perm(ADD_PERMISSION),
        "socket_url": socket_urls.list_socket_url(since),
    }
    partial = request.htmx and not request.htmx.history_restore_request
    template = "conversations/list.html#results" if partial else "conversations/list.html"
    return render(request, template, context, status=400 if error else 200)


@require_GET
@vary_on_headers("HX-Request")
@operator_required
@_options
def conversation_detail(
    request: HtmxHttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    conversation = _conversation(conversation_id)
    narrow = _unchanged
    if _may_share(request):
        narrow = functools.partial(_with_shares, conversation)
    return detail_response(request, conversation, vision=vision, shape=shape, narrow=narrow)


SHARE_PERMISSION = "conversations.share_conversation"


def _may_share(request: HttpRequest) -> bool:
    return bool(settings.REPLAY_SHARING) and request.user.has_perm(SHARE_PERMISSION)


def _with_shares(
    conversation: Conversation, context: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return context | presenters.shares_panel(conversation, **extra)


Narrow: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]


def _unchanged(context: dict[str, Any]) -> dict[str, Any]:
    return context


def detail_response(
    request: HttpRequest,
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    narrow: Narrow = _unchanged,
    template: str = "conversations/detail.html",
) -> HttpResponse:
    """The conversation page (or, for htmx, its `conversation` partial); `narrow` adjusts
    the context (a share page narrows it to what its link shows)."""
    try:
        context = narrow(
            presenters.conversation_page(
                conversation,
                window=page_windows.tail(conversation.message_count),
                vision=vision,
                shape=shape,
                view=view_query(request),
            )
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    htmx = getattr(request, "htmx", None)
    if htmx and not htmx.history_restore_request:
        response = render(request, template + "#conversation", context)
        return push_url(response, context["self_url"])
    return render(request, template, context)


def _seq(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise ValueError(name)
    return int(value)


@require_GET
@operator_required
@_options
def earlier_messages(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    return window_response(request, _conversation(conversation_id), vision=vision, shape=shape)


def window_response(
    request: HttpRequest,
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    narrow: Narrow = _unchanged,
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
            presenters.conversation_page(
                conversation,
                window=window,
                vision=vision,
                shape=shape,
                earlier=earlier,
                later=later,
                view=view_query(request),
            )  # fmt: skip
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/detail.html#window", context)


@require_GET
@operator_required
def block_text(request: HttpRequest, conversation_id: str, seq: int, block: int) -> HttpResponse:
    return block_text_response(_conversation(conversation_id), seq, block)


def block_text_response(conversation: Conversation, seq: int, block: int) -> HttpResponse:
    """The whole text of one block, as plain text (what a page shows the start of)."""
    message = selectors.message_full(conversation, seq)
    found = [b for b in message.blocks if b.seq == block] if message else []
    if not found or found[0].type == "image":
        raise Http404("No such text block.")
    return _plain(presenters.block_full_text(found[0]))


@require_GET
@operator_required
@_options
def wire_text(
    request: HttpRequest, conversation_id: str, seq: int, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    return wire_text_response(
        request, _conversation(conversation_id), seq, vision=vision, shape=shape
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
    (stored,) = selectors.stored_messages([message])
    content = replay.project_message(stored, vision=vision, shape=shape)["content"]
    part = request.GET.get("part")
    if isinstance(content, str):
        return _plain(content)
    texts = {str(i): p["text"] for i, p in enumerate(content) if p["type"] == "text"}
    if part not in texts:
        return bad_request(request, "part must name a text part of this message.")
    return _plain(texts[part])


@require_GET
@operator_required
def message_record(request: HttpRequest, conversation_id: str, seq: int) -> HttpResponse:
    """One stored message exactly as GET /api/conversations/ID lists it (the page's "Copy
    record JSON"; fetched on click, so a page never carries a message's whole record)."""
    message = selectors.message_full(_conversation(conversation_id), seq)
    if message is None:
        raise Http404("No such message.")
    return _json(orjson.dumps(shapes.message_data(message, message.blocks)))


@require_GET
@operator_required
@_options
def message_projection(
    request: HttpRequest, conversation_id: str, seq: int, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    return message_projection_response(
        _conversation(conversation_id), seq, vision=vision, shape=shape
    )


def message_projection_response(
    conversation: Conversation, seq: int, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """One message's wire message for these toggles, as the projection gives it (the page's
    "Copy projection"): `{"role", "content"}`, the system role kept in either shape."""
    message = selectors.message_full(conversation, seq)
    if message is None:
        raise Http404("No such message.")
    (stored,) = selectors.stored_messages([message])
    return _json(orjson.dumps(replay.project_message(stored, vision=vision, shape=shape)))


def _json(body: bytes, status: int = 200) -> HttpResponse:
    response = HttpResponse(body, content_type="application/json", status=status)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


def _plain(text: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


@require_GET
@operator_required
@_options
def replay_download(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """The same bytes as GET /api/conversations/ID/replay (with `?compact=` too), for a
    signed-in operator."""
    conversation = _conversation(conversation_id)
    try:
        policy = Policy.from_query(request.GET)
    except OptionError as exc:
        return bad_request(request, exc.message)
    if policy is None:
        body = selectors.replay_json(conversation, vision=vision, shape=shape)
    else:
        body = orjson.dumps(
            token_counts.compacted_payload(conversation, ReplayOptions(vision, shape), policy)
        )
    response = HttpResponse(body, content_type="application/json")
    suffix = f"-{policy.name}" if policy is not None else ""
    name = f"replay-{conversation.id}-{shape}-vision-{'on' if vision else 'off'}{suffix}.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
@operator_required
@_options
def markdown_download(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """The same Markdown as GET /api/conversations/ID/markdown, as a file to save."""
    conversation = _conversation(conversation_id)
    response = HttpResponse(
        selectors.markdown_export(conversation, vision=vision, shape=shape),
        content_type="text/markdown; charset=utf-8",
    )
    name = f"conversation-{conversation.id}-{shape}-vision-{'on' if vision else 'off'}.md"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@operator_required
def block_image(request: HttpRequest, conversation_id: str, seq: int, block: int) -> HttpResponse:
    return image_response(_conversation(conversation_id), seq, block)


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


ADD_PERMISSION = "conversations.add_conversation"


@require_POST
@login_required
@permission_required(ADD_PERMISSION, raise_exception=True)
def import_file(request: HttpRequest) -> HttpResponse:
    """The list page's file drop: the file is the body (CSRF-protected, session signed in,
    add_conversation); answers JSON like POST /api/imports (no markup, nothing echoed)."""
    try:
        raw = request.body
    except RequestDataTooBig:
        return JsonResponse({"error": "The file is over the upload limit."}, status=413)
    name = unquote(request.headers.get("X-File-Name", ""))[:255] or None
    if not raw.strip():
        return JsonResponse({"error": "The file is empty."}, status=400)
    try:
        outcome = services.transcript_import(
            raw=raw, format=request.GET.get("format") or None, title=None, file_name=name
        )
    except (importers.ImportFormatError, services.IngestError) as exc:
        return JsonResponse({"error": f"The file is not readable: {exc}."}, status=400)
    conversation = outcome.conversation
    return JsonResponse(
        {
            "id": str(conversation.id),
            "url": conversation.get_absolute_url(),
            "messages": outcome.messages,
            "blocks": outcome.blocks,
            "gaps": len(outcome.gaps),
            "created": outcome.created,
        },
        status=201 if outcome.created else 200,
    )


def download_response(
    conversation: Conversation, *, vision: bool, shape: replay.Shape, stop: int | None = None
) -> HttpResponse:
    """The projection as an attachment (of the messages before `stop`, when given)."""
    response = HttpResponse(
        selectors.replay_json(conversation, vision=vision, shape=shape, stop=stop),
        content_type="application/json",
    )
    name = f"replay-{conversation.id}-{shape}-vision-{'on' if vision else 'off'}.json"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def _filled(request: HttpRequest) -> dict[str, str]:
    """The query without empty values (a form sends every field, filled or not)."""
    return {k: request.GET[k] for k in request.GET if request.GET[k] != ""}


def _form_policy(params: dict[str, str], prefix: str = "") -> Policy | None:
    """The policy a form asks for, ignoring the fields of other policies; OptionError names
    the parameter (with its prefix)."""
    own = {k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)}
    name = own.get("compact", "")
    if name in compact.POLICIES:
        wanted = {"compact", *compact.PARAMETERS[name]}
        own = {k: v for k, v in own.items() if k in wanted or k not in compact.ALL_PARAMETERS}
    else:
        own = {k: v for k, v in own.items() if k not in compact.ALL_PARAMETERS}
    try:
        return Policy.from_query(own)
    except OptionError as exc:
        raise OptionError(prefix + exc.field, exc.message) from None


def _start(params: dict[str, str]) -> int | None:
    value = params.get("from")
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise OptionError("from", "from must be a message number.")
    return int(value)


@require_GET
@operator_required
@_options
def conversation_context(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """The compaction preview (docs/contract.md §7): tokens before → after, changed blocks marked."""
    conversation = _conversation(conversation_id)
    params = _filled(request)
    try:
        context = presenters.context_page(
            conversation,
            ReplayOptions(vision, shape),
            _form_policy(params),
            view={k: params[k] for k in ("model", "window") if k in params},
            effective=params.get("payload") != "full",
            start=_start(params),
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/context.html", context)


@require_GET
@operator_required
@_options
def conversation_diff(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """Two projections aligned message by message: this conversation's (the page's toggles
    and `compact`) against `b_…` toggles, policy or `b_conversation`."""
    conversation = _conversation(conversation_id)
    params = _filled(request)
    try:
        right_options = ReplayOptions.from_query(
            {"vision": params.get("b_vision", str(int(vision))),
             "shape": params.get("b_shape", shape)}
        )  # fmt: skip
    except OptionError as exc:
        return bad_request(request, exc.message.replace(exc.field, "b_" + exc.field, 1))
    other = params.get("b_conversation")
    right_conversation = _conversation(other) if other else conversation
    try:
        left = presenters.DiffSide(
            "A", vision, shape, _form_policy(
                {k: v for k, v in params.items() if not k.startswith("b_")}
            ), conversation,
        )  # fmt: skip
        right = presenters.DiffSide(
            "B", right_options.vision, right_options.shape, _form_policy(params, "b_"),
            right_conversation,
        )  # fmt: skip
        context = presenters.diff_page(left, right, start=_start(params) or 0, here_query=params)
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/diff.html", context)


FORM_MIN_EXPIRY = timedelta(hours=1)


def _share_form(post: Any) -> dict[str, Any]:
    """The page's share form as `services.share_create` arguments; ValueError names the field."""
    up_to = post.get("up_to_seq", "").strip()
    if up_to and not up_to.isdigit():
        raise ValueError("Up to message # must be a message number, or empty for the whole.")
    at = post.get("expires_at", "").strip()
    chosen = post.get("expires_in", "").strip()
    expires_in: timedelta | None
    if at:
        try:
            when = datetime.fromisoformat(at).replace(tzinfo=UTC)
        except ValueError:
            raise ValueError("Expires at must be a date and time.") from None
        expires_in = when - timezone.now()
    elif chosen:
        if not chosen.isdigit():
            raise ValueError("Expires must be one of the choices offered.")
        expires_in = timedelta(seconds=int(chosen))
    else:
        expires_in = None
    if expires_in is not None and not FORM_MIN_EXPIRY <= expires_in <= services.SHARE_MAX_EXPIRY:
        raise ValueError("A link expires from 1 hour to 30 days from now, or never.")
    vision = {"": None, "1": True, "0": False}.get(post.get("vision", ""), "bad")
    shape = post.get("shape", "")
    if vision == "bad" or shape not in {"", *replay.SHAPES}:
        raise ValueError("Vision and shape must be one of the choices offered.")
    return {
        "up_to_seq": int(up_to) if up_to else None,
        "expires_in": expires_in,
        "vision": vision,
        "shape": shape or None,
        "images": post.get("images") == "1",
    }


def _shares_answer(request: HttpRequest, conversation: Conversation, **extra: Any) -> HttpResponse:
    """The `shares` partial for htmx, else the whole page with it."""
    if getattr(request, "htmx", None):
        return render(
            request,
            "conversations/detail.html#shares",
            presenters.shares_panel(conversation, **extra),
        )
    return detail_response(
        request,
        conversation,
        vision=True,
        shape="openai",
        narrow=functools.partial(_with_shares, conversation, **extra),
    )


def sharing_required(view: View) -> View:
    """Signed in with share_conversation (else login / 403); 404 with REPLAY_SHARING=0."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.REPLAY_SHARING:
            raise Http404("Sharing is off.")
        return view(request, *args, **kwargs)

    return login_required(permission_required(SHARE_PERMISSION, raise_exception=True)(wrapper))


@require_POST
@operator_required
@sharing_required
def share_create(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The page's share form: a new link, whose URL is shown this once."""
    conversation = _conversation(conversation_id)
    try:
        arguments = _share_form(request.POST)
        _, clear = services.share_create(
            conversation=conversation, created_by=request.user, **arguments
        )
    except ValueError as exc:
        return _shares_answer(request, conversation, share_error=str(exc))
    except services.IngestError as exc:
        return _shares_answer(request, conversation, share_error=str(exc))
    url = request.build_absolute_uri(reverse("share", kwargs={"token": clear}))
    return _shares_answer(request, conversation, new_share_url=url)


@require_POST
@operator_required
@sharing_required
def share_revoke(request: HttpRequest, conversation_id: str, share_id: int) -> HttpResponse:
    conversation = _conversation(conversation_id)
    link = selectors.share_by_id(share_id)
    if link is None or link.conversation_id != conversation.id:
        raise Http404("No such share link.")
    services.share_revoke(link=link)
    return _shares_answer(request, conversation)


# The finder (issue 11): what the conversation page looks for across the whole conversation.

# A JSON answer is never markup, whatever it quotes; escaped anyway, as json_script does,
# so that no sniffing reader ever meets a tag in it.
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def _found(body: dict[str, Any], status: int = 200) -> HttpResponse:
    return _json(orjson.dumps(body).decode().translate(_JSON_ESCAPES).encode(), status)


@require_GET
@operator_required
def conversation_find(request: HttpRequest, conversation_id: str) -> HttpResponse:
    return find_response(request, _conversation(conversation_id))


def _cursor(request: HttpRequest, name: str) -> Cursor | None:
    value = request.GET.get(name)
    return None if value is None else parse_cursor(name, value)


def find_response(request: HttpRequest, conversation: Conversation) -> HttpResponse:
    """`?kind=text&q=WORDS` a page of search hits (seq, block, snippet; "k of N" from
    `offset` and `total`); `?kind=problem|error|tool|reasoning|image` the next block of
    that kind (a problem: a tool error or a tool call with no result), one bounded step
    at a time (`resume` says where to go on from). `after=` or `before=` a place (`412`
    or `412.3`); neither: from the start. Bad parameters: a JSON 400 naming them."""
    try:
        after, before = _cursor(request, "after"), _cursor(request, "before")
        if after is not None and before is not None:
            raise FindError("after", "Give after or before, not both.")
        kind = request.GET.get("kind", "")
        if kind == "text":
            q = request.GET.get("q", "").replace("\x00", "").strip()
            if not q:
                raise FindError("q", "q is required with kind=text: the words to find.")
            page = finder_reads.search_page(conversation, q, after=after, before=before)
            return _found(
                {
                    "hits": [hit._asdict() for hit in page.hits],
                    "offset": page.offset,
                    "total": page.total,
                    "capped": page.capped,
                    "more": page.more,
                }
            )
        step = finder_reads.find_step(conversation, parse_kind(kind), after=after, before=before)
    except (FindError, QueryError) as exc:
        return _found({"error": exc.message, "field": exc.field}, status=400)
    return _found(
        {
            "found": step.found._asdict() if step.found is not None else None,
            "resume": str(step.resume) if step.resume is not None else None,
        }
    )
