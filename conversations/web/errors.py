"""What an API view raises to answer with an error: `ApiError` (status, sentence, extra
fields such as `field`), which the `api` decorator renders."""

from __future__ import annotations

from typing import Any

from django.conf import settings


class ApiError(Exception):
    def __init__(self, status: int, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.extra = extra


def too_big() -> ApiError:
    return ApiError(
        413,
        f"Request body is over the {settings.REPLAY_MAX_BODY_MB} MB limit (REPLAY_MAX_BODY_MB).",
    )
