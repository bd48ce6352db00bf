"""Idempotency-Key: a POST's first answer is kept with its key in the POST's own
transaction; a repeat gets that answer back and stores nothing again."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse

from conversations.record.models.tokens import ApiToken, IdempotentResponse
from conversations.record.services.idempotency import idempotent_response_save
from conversations.web.errors import ApiError, too_big


def run_idempotent(
    view: Callable[..., HttpResponse],
    request: HttpRequest,
    token: ApiToken,
    key: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> HttpResponse:
    """The answer kept for `key` (a 422 if it answered a different request), else `view`'s,
    run in one transaction that keeps it when it is a 2xx."""
    if not key or len(key) > 255:
        raise ApiError(400, "Idempotency-Key header must be 1 to 255 characters.")
    try:
        body = request.body
    except RequestDataTooBig:
        raise too_big() from None
    fingerprint = hashlib.sha256(
        b"%s %s\n%s" % (str(request.method).encode(), request.path.encode(), body)
    ).hexdigest()
    for _attempt in range(2):
        earlier = IdempotentResponse.objects.filter(token=token, key=key).first()
        if earlier is not None:
            if earlier.fingerprint != fingerprint:
                raise ApiError(
                    422,
                    "Idempotency-Key was already used for a different request; use a new key.",
                )
            response = HttpResponse(
                bytes(earlier.body), status=earlier.status, content_type="application/json"
            )
            response["Idempotent-Replayed"] = "true"
            return response
        try:
            with transaction.atomic():
                response = view(request, *args, **kwargs)
                if 200 <= response.status_code < 300:
                    idempotent_response_save(
                        token=token,
                        key=key,
                        fingerprint=fingerprint,
                        status=response.status_code,
                        body=response.content,
                    )
                return response
        except IntegrityError:
            # Another request with this key committed first: answer as it did.
            continue
    raise ApiError(409, "Idempotency-Key is in use by a concurrent request; retry.")
