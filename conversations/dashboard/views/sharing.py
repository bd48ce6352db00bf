"""The conversation page's share form (docs/contract.md §8): a new link, shown once, and
revoking one."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from conversations.core import replay
from conversations.dashboard.views.conversation import detail_response
from conversations.dashboard.views.share_panel import shares_context, with_shares
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation
from conversations.sharing import reads as sharing_reads
from conversations.sharing import services as services_module
from conversations.sharing.services import SHARE_MAX_EXPIRY
from conversations.web.pages import SHARE_PERMISSION, View, conversation_or_404, operator_required

FORM_MIN_EXPIRY = timedelta(hours=1)


def _share_form(post: Any) -> dict[str, Any]:
    """The page's share form as `sharing.services.share_create` arguments; ValueError names
    the field."""
    up_to = post.get("up_to_seq", "").strip()
    if up_to and not (up_to.isascii() and up_to.isdigit()):
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
        if not (chosen.isascii() and chosen.isdigit()):
            raise ValueError("Expires must be one of the choices offered.")
        # Past the longest expiry it is refused below, without overflowing a timedelta.
        longest = int(SHARE_MAX_EXPIRY.total_seconds())
        expires_in = timedelta(seconds=min(int(chosen), longest + 1))
    else:
        expires_in = None
    if expires_in is not None and not FORM_MIN_EXPIRY <= expires_in <= SHARE_MAX_EXPIRY:
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
        "notes": post.get("notes") == "1",
    }


def _shares_answer(request: HttpRequest, conversation: Conversation, **extra: Any) -> HttpResponse:
    """The `shares` partial for htmx, else the whole page with it."""
    if getattr(request, "htmx", None):
        return render(
            request,
            "conversations/detail.html#shares",
            shares_context(conversation, **extra),
        )
    return detail_response(
        request,
        conversation,
        vision=True,
        shape="openai",
        narrow=functools.partial(with_shares, conversation, **extra),
    )


def sharing_required(view: View) -> View:
    """Signed in with share_conversation (else login / 403); 404 with REPLAY_SHARING=0."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.REPLAY_SHARING:
            raise Http404("Sharing is off.")
        return view(request, *args, **kwargs)

    return login_required(permission_required(SHARE_PERMISSION, raise_exception=True)(wrapper))


@require_POST
@operator_required
@sharing_required
def share_create(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The page's share form: a new link, whose URL is shown this once."""
    conversation = conversation_or_404(conversation_id)
    try:
        arguments = _share_form(request.POST)
        _, clear = services_module.share_create(
            conversation=conversation, created_by=request.user, **arguments
        )
    except ValueError as exc:
        return _shares_answer(request, conversation, share_error=str(exc))
    except IngestError as exc:
        return _shares_answer(request, conversation, share_error=str(exc))
    url = request.build_absolute_uri(reverse("share", kwargs={"token": clear}))
    return _shares_answer(request, conversation, new_share_url=url)


@require_POST
@operator_required
@sharing_required
def share_revoke(request: HttpRequest, conversation_id: str, share_id: int) -> HttpResponse:
    conversation = conversation_or_404(conversation_id)
    link = sharing_reads.share_by_id(share_id)
    if link is None or link.conversation_id != conversation.id:
        raise Http404("No such share link.")
    services_module.share_revoke(link=link)
    return _shares_answer(request, conversation)
