"""WebSocket routes, served by the ASGI application; the paths are the pages' own."""

from typing import Any

from django.urls import path

from conversations.dashboard import share_pages, socket_urls
from conversations.live.conversation import ConversationConsumer
from conversations.live.listing import ListConsumer
from conversations.live.share import ShareConsumer

# django-stubs types path() for views only; channels' URLRouter takes ASGI apps here.
websocket_urlpatterns: list[Any] = [
    path(socket_urls.LIST_PATH, ListConsumer.as_asgi()),  # type: ignore[arg-type]
    path(
        socket_urls.CONVERSATION_PATH,
        ConversationConsumer.as_asgi(),  # type: ignore[arg-type]
    ),
    path(share_pages.SOCKET_PATH, ShareConsumer.as_asgi()),  # type: ignore[arg-type]
]
