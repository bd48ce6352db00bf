"""Share pages (docs/contract.md §8): one conversation, read-only, to whoever holds the
link's token.

Every share URL is `/s/TOKEN/` followed by the dashboard's own path (the conversation
page's windows, image and download endpoints), and the share views render the dashboard's
own partials with the script prefix set to `/s/TOKEN/`: every URL a page builds with
`reverse` then stays inside the link, and the share URLconf answers only the endpoints a
link allows. Each view checks the link again (unknown: 404; revoked or expired: 410) and
that what is asked for is inside its scope (its conversation, messages up to `up_to_seq`,
images only when the link includes them).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeAlias

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import get_script_prefix, set_script_prefix
from django.utils import timezone

from conversations.core import replay
from conversations.core.options import OptionError, ReplayOptions
from conversations.dashboard.presenters.messages import MessageView, read_only, without_images
from conversations.dashboard.views import conversation as conversation_views
from conversations.dashboard.views import finding
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors
from conversations.record.services.api_tokens import token_digest
from conversations.sharing import reads as sharing_reads
from conversations.sharing.models import ShareLink
from conversations.sharing.services import share_viewed

View: TypeAlias = Callable[..., HttpResponseBase]
SOCKET_PATH = "ws/s/<str:token>/"
SOCKET_GONE = 4410  # the link was revoked or expired while the socket was open

# Every share response, error pages included (docs/contract.md §8); the CSP is the dashboard's own,
# added by its middleware.
HEADERS = {
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
    "Cache-Control": "no-store",
}


def prefix(token: str) -> str:
    return f"/s/{token}/"


@contextmanager
def scoped_urls(token: str) -> Iterator[None]:
    """`reverse` builds URLs under `/s/TOKEN/` inside this block (context-local, restored)."""
    previous = get_script_prefix()
    set_script_prefix(prefix(token))
    try:
        yield
    finally:
        set_script_prefix(previous)


def options(link: ShareLink, query: ReplayOptions) -> ReplayOptions:
    """The toggles a link shows: fixed ones as fixed, free ones from the query; a link
    without images is seen with vision off (so its projection is what its page shows)."""
    vision = query.vision if link.vision is None else link.vision
    shape: replay.Shape = query.shape
    for known in replay.SHAPES:
        if link.shape == known:
            shape = known
    return ReplayOptions(vision=vision and link.images, shape=shape)


def scoped_conversation(link: ShareLink) -> Conversation:
    """The conversation as the link shows it: a frozen link ends at `up_to_seq`."""
    conversation = copy.copy(link.conversation)
    if link.up_to_seq is not None:
        conversation.message_count = min(conversation.message_count, link.up_to_seq + 1)
    return conversation


def withhold_images(views: Sequence[MessageView]) -> list[MessageView]:
    """The views with no image URL on their record side (a link without images)."""
    return [dataclasses.replace(view, blocks=without_images(view.blocks)) for view in views]


def without_records(views: Sequence[MessageView]) -> list[MessageView]:
    """The views with no "copy record JSON" link: the whole record (metadata, origins,
    images) is for operators, as the Markdown export is; nor a compaction's diff link,
    a page no share link reaches."""
    return [
        dataclasses.replace(
            view,
            record_url="",
            compaction=dataclasses.replace(view.compaction, diff_url="")
            if view.compaction
            else None,
        )
        for view in views
    ]


def link_state(link: ShareLink, now: datetime | None = None) -> str:
    return link.state(now or timezone.now())


def socket_url(token: str, opts: ReplayOptions) -> str:
    """The share page's socket; the page reports what it holds as soon as it opens."""
    path = "/" + SOCKET_PATH.replace("<str:token>", token)
    return path + "?" + opts.urlencode() + "&report=1"


def _gone(request: HttpRequest, link: ShareLink) -> HttpResponse:
    return render(
        request, "shared/gone.html", {"state": link_state(link), "share": True}, status=410
    )


def _not_found(request: HttpRequest) -> HttpResponse:
    return render(request, "404.html", {"share": True}, status=404)


def share_view(view: View) -> View:
    """Resolve the token (404 unknown, 410 revoked or expired, 404 with sharing off), parse
    the toggles (400 page), build URLs inside the link, and send docs/contract.md §8's headers."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, token: str, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with scoped_urls(token):
            if request.method != "GET":  # read-only, and answered with the headers too
                response: HttpResponseBase = HttpResponseNotAllowed(["GET"])
            else:
                response = _answer(request, token, args, kwargs)
        for name, value in HEADERS.items():
            response[name] = value
        return response

    def _answer(
        request: HttpRequest, token: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponseBase:
        if not settings.REPLAY_SHARING:
            return _not_found(request)
        link = sharing_reads.share_get(token_digest(token))
        if link is None:
            return _not_found(request)
        if link_state(link) != "active":
            return _gone(request, link)
        conversation_id = kwargs.pop("conversation_id", None)
        if conversation_id is not None and conversation_id != link.conversation_id:
            return _not_found(request)  # another conversation: not reachable from here
        try:
            query = ReplayOptions.from_query(request.GET)
        except OptionError as exc:
            return render(request, "400.html", {"message": exc.message, "share": True}, status=400)
        try:
            return view(request, link, token, options(link, query), *args, **kwargs)
        except Http404:
            return _not_found(request)

    return wrapper


def _page_context(
    link: ShareLink, token: str, opts: ReplayOptions, context: dict[str, Any]
) -> dict[str, Any]:
    """The dashboard's page context, narrowed to what the link shows."""
    conversation = context["conversation"]
    messages = read_only(without_records(context["messages"]), link.notes)
    if not link.images:
        messages = withhold_images(messages)
    toggles = [
        group
        for group in context["toggles"]
        if (group["key"] == "vision" and link.vision is None and link.images)
        or (group["key"] == "shape" and not link.shape)
    ]
    return context | {
        "messages": messages,
        "toggles": toggles,
        "share": link,
        "share_state": "active",
        "socket_url": "" if link.frozen else socket_url(token, opts),
        "download_url": prefix(token) + "replay.json?" + opts.urlencode(),
        "markdown_url": "",  # the export is the whole record: operators only
        "total_blocks": (
            selectors.block_total_through(conversation, link.up_to_seq)
            if link.up_to_seq is not None
            else context["total_blocks"]
        ),
    }


@share_view
def page(request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions) -> HttpResponse:
    """`/s/TOKEN/`: the conversation page, read-only; a page load counts one view."""
    htmx = getattr(request, "htmx", None)
    if not htmx:
        share_viewed(link=link)
    return conversation_views.detail_response(
        request,
        scoped_conversation(link),
        vision=opts.vision,
        shape=opts.shape,
        narrow=functools.partial(_page_context, link, token, opts),
    )


@share_view
def earlier_messages(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions
) -> HttpResponse:
    """A window of earlier messages, as the dashboard's, inside the link's scope."""
    return conversation_views.window_response(
        request,
        scoped_conversation(link),
        vision=opts.vision,
        shape=opts.shape,
        narrow=functools.partial(_page_context, link, token, opts),
    )


@share_view
def replay_download(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions
) -> HttpResponseBase:
    """The payload of what the link shows: the projection of the messages in its scope."""
    stop = None if link.up_to_seq is None else link.up_to_seq + 1
    return conversation_views.download_response(
        link.conversation, vision=opts.vision, shape=opts.shape, stop=stop
    )


def _in_scope(link: ShareLink, seq: int) -> None:
    if link.up_to_seq is not None and seq > link.up_to_seq:
        raise Http404("Past the link's last message.")


@share_view
def block_image(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions, seq: int, block: int
) -> HttpResponse:
    """An image block's bytes, when the link includes images and the message is in scope."""
    _in_scope(link, seq)
    if not link.images:
        raise Http404("This link does not include images.")
    response = conversation_views.image_response(link.conversation, seq, block)
    response["Cache-Control"] = "no-store"  # set again by share_view; never cached
    return response


@share_view
def not_here(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions, **_: Any
) -> HttpResponse:
    """Any other path under a share link: nothing else is reachable with it."""
    return _not_found(request)


@share_view
def block_text(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions, seq: int, block: int
) -> HttpResponse:
    """The rest of a block's text ("load the rest"), for a message in the link's scope."""
    _in_scope(link, seq)
    return conversation_views.block_text_response(link.conversation, seq, block)


@share_view
def message_blocks(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions, seq: int
) -> HttpResponse:
    """The next blocks of a message's record side ("Load more blocks"), inside the link's
    scope, images as the link says."""
    _in_scope(link, seq)
    return conversation_views.message_blocks_response(
        request, link.conversation, seq, images=link.images
    )


@share_view
def wire_text(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions, seq: int
) -> HttpResponse:
    """The rest of a message's wire text, with the link's toggles, inside its scope."""
    _in_scope(link, seq)
    return conversation_views.wire_text_response(
        request, link.conversation, seq, vision=opts.vision, shape=opts.shape
    )


@share_view
def message_projection(
    request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions, seq: int
) -> HttpResponse:
    """One message's wire message ("Copy projection"), with the link's toggles, in scope."""
    _in_scope(link, seq)
    return conversation_views.message_projection_response(
        link.conversation, seq, vision=opts.vision, shape=opts.shape
    )


@share_view
def find(request: HttpRequest, link: ShareLink, token: str, opts: ReplayOptions) -> HttpResponse:
    """The page's finder (search, filters' "find more", problems, tool rounds), inside the
    link's scope: a frozen link's finder never sees a message past its last."""
    return finding.find_response(request, scoped_conversation(link), notes=link.notes)
