from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from conversations import api, views

urlpatterns = [
    path("", views.conversation_list, name="conversation-list"),
    path("c/<str:conversation_id>/", views.conversation_detail, name="conversation"),
    path(
        "c/<str:conversation_id>/messages",
        views.earlier_messages,
        name="earlier-messages",
    ),
    path("c/<str:conversation_id>/replay.json", views.replay_download, name="replay-download"),
    path(
        "c/<str:conversation_id>/m/<int:seq>/b/<int:block>/image",
        views.block_image,
        name="block-image",
    ),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
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

handler403 = "conversations.views.forbidden"
handler404 = "conversations.api.not_found"
handler500 = "conversations.api.server_error"
