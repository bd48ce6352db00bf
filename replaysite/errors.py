"""Site-wide error pages: JSON under /api/, templates (escaped) everywhere else."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from conversations.web.api import error_response


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    # The exception's text can quote the request (a Host header, a field): never shown.
    if request.path.startswith("/api/"):
        return error_response(400, "The request could not be read.")
    return render(request, "400.html", status=400)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return error_response(404, "No API endpoint at this path.")
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return error_response(500, "Replay failed to answer this request; the error was logged.")
    return render(request, "500.html", status=500)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "403.html", status=403)
