from django.urls import path

from conversations.alerts import api as alerts
from conversations.api import views
from conversations.ingest import otlp

urlpatterns = [
    path("api/imports", views.imports, name="api-imports"),
    path("v1/traces", otlp.traces, name="otlp-traces"),
    path("api/conversations", views.conversations, name="api-conversations"),
    path("api/conversations/<str:conversation_id>", views.conversation, name="api-conversation"),
    path(
        "api/conversations/<str:conversation_id>/messages",
        views.messages,
        name="api-messages",
    ),
    path(
        "api/conversations/<str:conversation_id>/messages/batch",
        views.messages_batch,
        name="api-messages-batch",
    ),
    path(
        "api/conversations/<str:conversation_id>/messages/<int:seq>/blocks",
        views.blocks,
        name="api-blocks",
    ),
    path(
        "api/conversations/<str:conversation_id>/replay",
        views.replay_payload,
        name="api-replay",
    ),
    path(
        "api/conversations/<str:conversation_id>/markdown",
        views.markdown_export,
        name="api-markdown",
    ),
    path(
        "api/conversations/<str:conversation_id>/context",
        views.context,
        name="api-context",
    ),
    path(
        "api/conversations/<str:conversation_id>/shares",
        views.shares,
        name="api-shares",
    ),
    path("api/shares/<int:share_id>", views.share, name="api-share"),
    path(
        "api/conversations/<str:conversation_id>/messages/<int:seq>/notes",
        views.message_notes,
        name="api-message-notes",
    ),
    path(
        "api/conversations/<str:conversation_id>/notes",
        views.conversation_notes,
        name="api-notes",
    ),
    path("api/notes/<str:note_id>", views.note, name="api-note"),
    path("api/compare", views.compare, name="api-compare"),
    path("api/alert-rules", alerts.alert_rules, name="api-alert-rules"),
    path("api/alert-rules/<int:rule_id>", alerts.alert_rule, name="api-alert-rule"),
]
