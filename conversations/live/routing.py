"""WebSocket routes, served by the ASGI application; the paths are the pages' own."""

from typing import Any

from django.urls import path

from conversations.dashboard import shared, sockets
from conversations.live import consumers

# django-stubs types path() for views only; channels' URLRouter takes ASGI apps here.
websocket_urlpatterns: list[Any] = [
    path(sockets.LIST_PATH, consumers.ListConsumer.as_asgi()),  # type: ignore[arg-type]
    path(
        sockets.CONVERSATION_PATH,
        consumers.ConversationConsumer.as_asgi(),  # type: ignore[arg-type]
    ),
    path(shared.SOCKET_PATH, consumers.ShareConsumer.as_asgi()),  # type: ignore[arg-type]
]
