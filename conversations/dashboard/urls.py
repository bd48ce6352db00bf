from django.urls import path

from conversations.alerts import views as alerts
from conversations.compare import views as compare
from conversations.dashboard.views import context, conversation, finding, listing, notes, sharing
from conversations.ingest import views as imports

urlpatterns = [
    path("", listing.conversation_list, name="conversation-list"),
    path("imports", imports.import_file, name="dashboard-import"),
    path("compare/", compare.compare_runs, name="compare"),
    path("c/<str:conversation_id>/", conversation.conversation_detail, name="conversation"),
    path(
        "c/<str:conversation_id>/messages",
        conversation.earlier_messages,
        name="earlier-messages",
    ),
    path(
        "c/<str:conversation_id>/context", context.conversation_context, name="conversation-context"
    ),
    path("c/<str:conversation_id>/diff", context.conversation_diff, name="conversation-diff"),
    path("c/<str:conversation_id>/find", finding.conversation_find, name="conversation-find"),
    path(
        "c/<str:conversation_id>/window",
        conversation.conversation_window,
        name="conversation-window",
    ),
    path(
        "c/<str:conversation_id>/replay.json", conversation.replay_download, name="replay-download"
    ),
    path(
        "c/<str:conversation_id>/export.md",
        conversation.markdown_download,
        name="markdown-download",
    ),
    path(
        "c/<str:conversation_id>/m/<int:seq>/b/<int:block>/text",
        conversation.block_text,
        name="block-text",
    ),
    path("c/<str:conversation_id>/m/<int:seq>/wire", conversation.wire_text, name="wire-text"),
    path(
        "c/<str:conversation_id>/m/<int:seq>/blocks",
        conversation.message_blocks,
        name="message-blocks",
    ),
    path(
        "c/<str:conversation_id>/m/<int:seq>/record.json",
        conversation.message_record,
        name="message-record",
    ),
    path(
        "c/<str:conversation_id>/m/<int:seq>/projection.json",
        conversation.message_projection,
        name="message-projection",
    ),
    path(
        "c/<str:conversation_id>/m/<int:seq>/b/<int:block>/image",
        conversation.block_image,
        name="block-image",
    ),
    path("c/<str:conversation_id>/shares", sharing.share_create, name="share-create"),
    path(
        "c/<str:conversation_id>/shares/<int:share_id>/revoke",
        sharing.share_revoke,
        name="share-revoke",
    ),
    path("c/<str:conversation_id>/m/<int:seq>/notes", notes.note_add, name="note-add"),
    path("c/<str:conversation_id>/notes/<int:note_id>", notes.note_detail, name="note"),
    path("c/<str:conversation_id>/notes/<int:note_id>/edit", notes.note_edit, name="note-edit"),
    path(
        "c/<str:conversation_id>/notes/<int:note_id>/delete",
        notes.note_delete,
        name="note-delete",
    ),
    path(
        "c/<str:conversation_id>/alerts/<int:alert_id>/acknowledge",
        alerts.alert_acknowledge,
        name="alert-acknowledge",
    ),
]
