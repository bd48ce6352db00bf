"""Paths browsers ask for by convention rather than by a link in a page."""

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.templatetags.static import static
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_safe


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico: a temporary redirect to the SVG icon the pages link to (its static URL
    carries a content hash in production, so a permanent redirect would outlive it)."""
    response = HttpResponseRedirect(static("favicon.svg"))
    patch_cache_control(response, public=True, max_age=86400)
    return response
