"""What every dashboard view shares: the operator check, the conversation lookup, the
`?vision=`/`?shape=` parsing, 400 pages, and plain and JSON answers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeAlias

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from conversations.core.options import OptionError, ReplayOptions
from conversations.record.counting import token_counts
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors

View: TypeAlias = Callable[..., HttpResponseBase]


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


PERMISSION = "conversations.view_conversation"
ADD_PERMISSION = "conversations.add_conversation"
SHARE_PERMISSION = "conversations.share_conversation"


def operator_required(view: View) -> View:
    """Signed in (else the login page) with view_conversation (else 403)."""
    return login_required(permission_required(PERMISSION, raise_exception=True)(view))


def conversation_or_404(conversation_id: str) -> Conversation:
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        raise Http404("No such conversation.")
    return conversation


def bad_request(request: HttpRequest, message: str) -> HttpResponse:
    """A 400 page rendered from its template, so the message (which may quote the
    request) is escaped, and the page runs no htmx (docs/contract.md §4, Errors)."""
    return render(request, "400.html", {"message": message}, status=400)


def with_options(view: View) -> View:
    """Parse ?vision= and ?shape= as the API does; a bad value is a 400 page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            options = ReplayOptions.from_query(request.GET)
        except OptionError as exc:
            return bad_request(request, exc.message)
        return view(request, *args, vision=options.vision, shape=options.shape, **kwargs)

    return wrapper


def view_query(request: HttpRequest) -> dict[str, str]:
    """The pressure view's overrides, `?model=`, `?window=` and `?upto=` (validated where used)."""
    return {k: request.GET[k] for k in token_counts.VIEW_KEYS if k in request.GET}


def json_response(body: bytes, status: int = 200) -> HttpResponse:
    response = HttpResponse(body, content_type="application/json", status=status)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


def plain_response(text: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


Narrow: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]


def unchanged(context: dict[str, Any]) -> dict[str, Any]:
    return context


def may_share(request: HttpRequest) -> bool:
    return bool(settings.REPLAY_SHARING) and request.user.has_perm(SHARE_PERMISSION)
