from django.urls import path

from conversations.dashboard import views

urlpatterns = [
    path("", views.conversation_list, name="conversation-list"),
    path("imports", views.import_file, name="dashboard-import"),
    path("c/<str:conversation_id>/", views.conversation_detail, name="conversation"),
    path(
        "c/<str:conversation_id>/messages",
        views.earlier_messages,
        name="earlier-messages",
    ),
    path(
        "c/<str:conversation_id>/context", views.conversation_context, name="conversation-context"
    ),
    path("c/<str:conversation_id>/diff", views.conversation_diff, name="conversation-diff"),
    path("c/<str:conversation_id>/find", views.conversation_find, name="conversation-find"),
    path("c/<str:conversation_id>/replay.json", views.replay_download, name="replay-download"),
    path("c/<str:conversation_id>/export.md", views.markdown_download, name="markdown-download"),
    path(
        "c/<str:conversation_id>/m/<int:seq>/b/<int:block>/text",
        views.block_text,
        name="block-text",
    ),
    path("c/<str:conversation_id>/m/<int:seq>/wire", views.wire_text, name="wire-text"),
    path(
        "c/<str:conversation_id>/m/<int:seq>/record.json",
        views.message_record,
        name="message-record",
    ),
    path(
        "c/<str:conversation_id>/m/<int:seq>/projection.json",
        views.message_projection,
        name="message-projection",
    ),
    path(
        "c/<str:conversation_id>/m/<int:seq>/b/<int:block>/image",
        views.block_image,
        name="block-image",
    ),
    path("c/<str:conversation_id>/shares", views.share_create, name="share-create"),
    path(
        "c/<str:conversation_id>/shares/<int:share_id>/revoke",
        views.share_revoke,
        name="share-revoke",
    ),
]
