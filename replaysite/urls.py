from django.contrib import admin
from django.urls import path

from conversations import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/conversations", api.conversations, name="api-conversations"),
    path("api/conversations/<str:conversation_id>", api.conversation, name="api-conversation"),
    path(
        "api/conversations/<str:conversation_id>/messages",
        api.messages,
        name="api-messages",
    ),
    path(
        "api/conversations/<str:conversation_id>/messages/<int:seq>/blocks",
        api.blocks,
        name="api-blocks",
    ),
    path(
        "api/conversations/<str:conversation_id>/replay",
        api.replay_payload,
        name="api-replay",
    ),
]

handler404 = "conversations.api.not_found"
handler500 = "conversations.api.server_error"
