"""WebSocket routes; the pages build their socket URLs with the functions below."""

from typing import Any
from urllib.parse import urlencode

from django.urls import path

from conversations import consumers

# django-stubs types path() for views only; channels' URLRouter takes ASGI apps here.
websocket_urlpatterns: list[Any] = [
    path("ws/conversations/", consumers.ListConsumer.as_asgi()),  # type: ignore[arg-type]
    path(
        "ws/conversations/<uuid:conversation_id>/",
        consumers.ConversationConsumer.as_asgi(),  # type: ignore[arg-type]
    ),
]


def list_socket_url() -> str:
    return "/ws/conversations/"


def conversation_socket_url(conversation_id: object, *, vision: bool, shape: str) -> str:
    return f"/ws/conversations/{conversation_id}/?" + urlencode(
        {"vision": int(vision), "shape": shape}
    )
