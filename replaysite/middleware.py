"""Defence in depth for the admin (issue 7, finding 1).

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
