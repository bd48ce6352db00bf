"""The API decorator: `@api` checks the method, authenticates the bearer token and turns
failures into JSON errors; `parse_json` and `validate` read a body under docs/contract.md
§3's limits, once, at the edge."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeAlias, cast

import orjson
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from conversations.core import strictjson
from conversations.record.errors import IngestError
from conversations.record.models.tokens import ApiToken
from conversations.record.schemas import error_list, error_sentence
from conversations.record.services.api_tokens import token_digest
from conversations.web.errors import ApiError, too_big
from conversations.web.idempotency import run_idempotent

View: TypeAlias = Callable[..., HttpResponseBase]
TOKEN_TOUCH_INTERVAL = timedelta(minutes=5)
TOKEN_LABEL = "replay.token_label"  # where a view finds its token's label


def json_response(data: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(data), status=status, content_type="application/json")


def error_response(status: int, error: str, **extra: Any) -> HttpResponse:
    response = json_response({"error": error, **extra}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="replay"'
    return response


def authenticate(request: HttpRequest) -> ApiToken:
    header = request.headers.get("Authorization", "")
    scheme, _, clear = header.partition(" ")
    if not header:
        raise ApiError(401, "Authorization header is missing: send 'Authorization: Bearer TOKEN'.")
    if scheme.lower() != "bearer" or not clear.strip():
        raise ApiError(401, "Authorization header must be 'Bearer TOKEN'.")
    digest = token_digest(clear.strip())
    token = ApiToken.objects.filter(digest=digest, revoked_at__isnull=True).first()
    if token is None:
        raise ApiError(401, "API token is unknown or revoked.")
    now = timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise ApiError(401, "API token has expired: create a new one (create_api_token).")
    if token.last_used_at is None or now - token.last_used_at > TOKEN_TOUCH_INTERVAL:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def parse_json(request: HttpRequest) -> dict[str, Any]:
    """The body as a JSON object under docs/contract.md §3's limits (depth, duplicate keys,
    exact numbers)."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_big() from None
    if not raw.strip():
        raise ApiError(400, "Request body is empty: send a JSON object.")
    try:
        data = strictjson.loads(raw)
    except strictjson.StrictJSONError as exc:
        raise ApiError(400, _json_sentence(exc), field=exc.field) from None
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object.")
    return data


def _json_sentence(exc: strictjson.StrictJSONError) -> str:
    if exc.path:
        return f"{exc.path}: {exc.reason}."
    return f"Request body {exc.reason}."


def validate(schema: type[BaseModel], data: Any) -> Any:
    """`data` as `schema`, else a 400 naming the first field, with the first few errors."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise schema_error(exc) from None


def schema_error(exc: ValidationError) -> ApiError:
    """A refused body's 400: the first error's sentence and field, then the first few."""
    errors = error_list(exc)
    return ApiError(400, error_sentence(exc), field=errors[0]["field"], errors=errors)


ErrorRenderer: TypeAlias = Callable[[HttpRequest, int, str, dict[str, Any]], HttpResponse]


def _json_error(
    request: HttpRequest, status: int, error: str, extra: dict[str, Any]
) -> HttpResponse:
    return error_response(status, error, **extra)


def api(
    *methods: str, errors: ErrorRenderer = _json_error, idempotent: bool = True
) -> Callable[[View], View]:
    """Authenticate the bearer token, check the method, and turn failures into JSON errors
    (or into what `errors` renders, for protocols with error bodies of their own).

    A POST with an Idempotency-Key runs in one transaction with the saved answer, so a
    repeat returns the first answer and stores nothing again. `idempotent=False`: the
    answer holds a secret that must not be stored (a share link's token), so the header
    is refused.
    """

    def decorator(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                if request.method not in methods:
                    response = errors(
                        request,
                        405,
                        f"Method {request.method} is not allowed here; use {', '.join(methods)}.",
                        {},
                    )
                    response["Allow"] = ", ".join(methods)
                    return response
                token = authenticate(request)
                request.META[TOKEN_LABEL] = token.label  # a note's author (contract §10)
                key = request.headers.get("Idempotency-Key")
                if request.method == "POST" and key is not None:
                    if not idempotent:
                        raise ApiError(
                            400,
                            "Idempotency-Key is not accepted here: the answer holds a token "
                            "that is shown once and never stored.",
                            field="Idempotency-Key",
                        )
                    # POSTs answer whole bodies (never streamed), which can be kept.
                    post = cast(Callable[..., HttpResponse], view)
                    return run_idempotent(post, request, token, key, args, kwargs)
                return view(request, *args, **kwargs)
            except ApiError as exc:
                response = errors(request, exc.status, exc.error, exc.extra)
                if exc.status == 401:
                    response["WWW-Authenticate"] = 'Bearer realm="replay"'
                return response
            except IngestError as exc:
                return errors(request, 400, str(exc), {"field": exc.field})
            except RequestDataTooBig:
                over = too_big()
                return errors(request, over.status, over.error, {})

        return wrapper

    return decorator
