"""Site-wide middleware: defence in depth for the admin, and the share headers.

The admin is never driven by htmx. A request to it that carries `HX-Request` can only
come from markup planted in a dashboard page and run by the page's own htmx, acting
with the operator's session and CSRF token (a crafted link that makes a superuser
create another). Such requests are refused before any admin view runs.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

Handler = Callable[[HttpRequest], HttpResponse]


def admin_refuses_htmx(get_response: Handler) -> Handler:
    """403 for any request under the admin that says it was sent by htmx."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if "HX-Request" in request.headers and request.path.startswith(reverse("admin:index")):
            message = "The admin does not answer requests sent by htmx; open it directly."
            return render(request, "403.html", {"message": message}, status=403)
        return get_response(request)

    return middleware


def share_headers(get_response: Handler) -> Handler:
    """The share headers (docs/contract.md §8) on every response under a share link, the
    ones no share view made included: the CSRF 403 of a POST, a 404, a 405."""
    from conversations.dashboard.share_pages import HEADERS

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if request.path.startswith("/s/"):
            for name, value in HEADERS.items():
                response.headers[name] = value  # over the site's own Referrer-Policy
        return response

    return middleware
