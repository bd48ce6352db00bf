"""Django admin: conversations, messages (blocks inline, projection preview) and API tokens.

The record is append-only: messages and blocks are shown, never edited or deleted one
by one here; new conversations and tokens are made, and whole conversations deleted
(by users with conversations.delete_conversation), through the services.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from pydantic import ValidationError as SchemaError

from conversations.core import replay, strictjson
from conversations.core.search import QueryError
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.notes import Note
from conversations.record.models.tokens import ApiToken
from conversations.record.notes.services import note_delete
from conversations.record.reads import selectors, shapes
from conversations.record.reads.rows import stored_messages
from conversations.record.schemas import ConversationIn, error_list
from conversations.record.search import reads as search_reads
from conversations.record.services.api_tokens import api_token_create, api_token_revoke
from conversations.record.services.conversations import (
    conversation_create,
    conversation_delete,
    conversation_update,
)

M = TypeVar("M", bound=Model)


class ReplayAdmin(admin.ModelAdmin[M]):
    """Every admin of the record. Each action names the permission it needs
    (`@admin.action(permissions=...)`, docs/contract.md §4); one posted by a user it is
    not offered to is a 403 (Django alone would answer with the list, as if not asked)."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse | HttpResponse:
        if request.method == "POST":
            allowed = self.get_actions(request)
            if any(name and name not in allowed for name in request.POST.getlist("action")):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deleting one message would leave a hole in the dense seqs


class StrictJSONField(forms.JSONField):
    """The admin's JSON text read as the API reads a body (the limits of docs/contract.md §3);
    empty is {}."""

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return {}
        if not isinstance(value, str):
            return value
        try:
            return strictjson.loads(value, root="metadata")
        except strictjson.StrictJSONError as exc:
            raise ValidationError(str(exc), code="invalid") from None


class ConversationForm(forms.ModelForm[Conversation]):
    """Validated through `ConversationIn`, the API's schema, before the services store it."""

    metadata = StrictJSONField(required=False, widget=forms.Textarea(attrs={"rows": 8}))

    class Meta:
        model = Conversation
        fields = ["title", "metadata"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        try:
            data = ConversationIn.model_validate(
                {"title": cleaned.get("title", ""), "metadata": cleaned.get("metadata")}
            )
        except SchemaError as exc:
            for error in error_list(exc):
                name = error["field"].split(".")[0].split("[")[0]
                self.add_error(name if name in self.fields else None, error["message"])
            return cleaned
        cleaned["title"], cleaned["metadata"] = data.title, data.metadata
        return cleaned


@admin.register(Conversation)
class ConversationAdmin(ReplayAdmin[Conversation]):
    form = ConversationForm
    list_display = ["title", "message_count", "updated_at", "created_at", "dashboard_link"]
    list_filter = ["updated_at", "created_at"]
    search_fields = ["title", "=id"]
    readonly_fields = ["id", "message_count", "created_at", "updated_at", "dashboard_link"]
    fields = [
        "id",
        "title",
        "metadata",
        "message_count",
        "created_at",
        "updated_at",
        "dashboard_link",
    ]
    date_hierarchy = "updated_at"

    @admin.display(description="Dashboard")
    def dashboard_link(self, obj: Conversation) -> str:
        if obj.pk is None:
            return "—"
        return format_html('<a href="{}">Open in Replay</a>', obj.get_absolute_url())

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """What the confirmation page lists: each conversation and the number of its
        messages and blocks, not every row (bounded), and no delete permission asked for
        them: they go with their conversation, and are never deleted one by one."""
        conversations = list(objs)
        totals = selectors.deletion_totals([c.pk for c in conversations])
        listed: list[Any] = [
            format_html(
                "Conversation: {} ({} messages, {} blocks)",
                str(c),
                *totals.get(c.pk, (0, 0)),
            )
            for c in conversations[:100]
        ]
        if len(conversations) > 100:
            listed.append(f"… and {len(conversations) - 100} more conversations")
        messages_total = sum(m for m, _ in totals.values())
        blocks_total = sum(b for _, b in totals.values())
        counts = {
            str(Conversation._meta.verbose_name_plural): len(conversations),
            str(Message._meta.verbose_name_plural): messages_total,
            str(Block._meta.verbose_name_plural): blocks_total,
        }
        return listed, counts, set(), []

    def delete_model(self, request: HttpRequest, obj: Conversation) -> None:
        conversation_delete(conversation=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        for conversation in queryset:
            conversation_delete(conversation=conversation)

    def save_model(self, request: HttpRequest, obj: Conversation, form: Any, change: bool) -> None:
        if change:
            conversation_update(conversation=obj, title=obj.title, metadata=obj.metadata)
        else:
            created = conversation_create(title=obj.title, metadata=obj.metadata)
            obj.pk = created.pk
            obj.created_at = created.created_at
            obj.updated_at = created.updated_at


class BlockInline(ReadOnlyMixin, admin.TabularInline[Block, Message]):
    model = Block
    extra = 0
    can_delete = False
    fields = readonly_fields = ("seq", "type", "name", "call_id", "is_error", "summary")

    @admin.display(description="Content")
    def summary(self, obj: Block) -> str:
        data = shapes.block_data(obj)
        data.pop("seq")
        data.pop("type")
        if "data" in data:
            data["data"] = f"{len(obj.data)} base64 characters"
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
        return format_html('<pre class="replay-block">{}</pre>', text[:4000])


@admin.register(Message)
class MessageAdmin(ReadOnlyMixin, ReplayAdmin[Message]):
    list_display = ["conversation", "seq", "role", "block_count", "created_at"]
    list_filter = ["role", "created_at"]
    list_select_related = ["conversation"]
    # The search box; `get_search_results` does the searching, through the index.
    search_fields = ["=conversation__id"]
    search_help_text = (
        "Words found in the messages' blocks or their conversation's title (as the "
        "dashboard's search finds them), or a conversation's id."
    )
    show_full_result_count = False  # counting every message would read them all
    fields = readonly_fields = (
        "conversation",
        "seq",
        "role",
        "block_count",
        "created_at",
        "projection",
    )
    inlines = [BlockInline]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        """Block text and titles through the full-text index, or a conversation's id
        (`search_reads.messages_matching`: bounded, index-backed)."""
        if not search_term.strip():
            return queryset, False
        try:
            found = search_reads.messages_matching(
                search_term, limit=search_reads.MESSAGE_SEARCH_BLOCKS
            )
        except QueryError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return queryset.none(), False
        if found.capped:
            self.message_user(
                request,
                f"More than {search_reads.MESSAGE_SEARCH_BLOCKS:,} blocks (or "
                f"{search_reads.MESSAGE_SEARCH_TITLES} titles) hold these words: shown are the "
                "messages of the first ones found. Add a word to narrow it.",
                messages.WARNING,
            )
        return queryset.filter(found.condition), False

    @admin.display(description="Projection (what the model receives)")
    def projection(self, obj: Message) -> str:
        """This message as each shape's payload carries it, for both vision settings: in the
        anthropic shape a system message is lifted into the request's `system`."""
        rows = selectors.message_rows(obj.conversation, start=obj.seq, stop=obj.seq + 1)
        stored = stored_messages(rows)
        previews = []
        for shape in replay.SHAPES:
            for vision in (True, False):
                payload = replay.project(stored, vision=vision, shape=shape)
                shown: Any = payload["messages"][0] if payload["messages"] else {}
                note = ""
                if "system" in payload:
                    shown, note = {"system": payload.get("system")}, " · lifted into system"
                text = orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode()
                previews.append(
                    format_html(
                        "<h4>{} · vision {}{}</h4><pre>{}</pre>",
                        shape,
                        "on" if vision else "off",
                        note,
                        text[:20000],
                    )
                )
        return format_html("{}" * len(previews), *previews)


@admin.register(ApiToken)
class ApiTokenAdmin(ReplayAdmin[ApiToken]):
    list_display = ["label", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["label", "prefix"]
    fields = ["label", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["label", "expires_at"])
            return
        token, clear = api_token_create(label=obj.label)
        if obj.expires_at is not None:
            token.expires_at = obj.expires_at
            token.save(update_fields=["expires_at"])
        obj.pk = token.pk
        obj.digest, obj.prefix, obj.created_at = token.digest, token.prefix, token.created_at
        messages.warning(
            request, f"Token for {token.label!r}: {clear} — copy it now, it is not shown again."
        )

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            api_token_revoke(token=token)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


@admin.register(Note)
class NoteAdmin(ReplayAdmin[Note]):
    """Operators' notes (docs/contract.md §10): listed and read here, deleted through the
    service (which tells open pages); written and edited on the conversation page or the
    API, where the author is known."""

    list_display = [
        "id",
        "conversation",
        "message_seq",
        "block_seq",
        "author",
        "label_list",
        "excerpt",
        "created_at",
        "updated_at",
    ]
    list_select_related = ["conversation"]
    list_filter = ["created_at"]
    search_fields = ["author", "=conversation__id", "label_rows__name"]
    fields = readonly_fields = (
        "conversation",
        "message_seq",
        "block_seq",
        "author",
        "label_list",
        "text",
        "created_at",
        "updated_at",
        "dashboard_link",
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Labels")
    def label_list(self, obj: Note) -> str:
        return ", ".join(obj.labels)

    @admin.display(description="Text")
    def excerpt(self, obj: Note) -> str:
        return obj.text if len(obj.text) <= 120 else obj.text[:120] + "…"

    @admin.display(description="Dashboard")
    def dashboard_link(self, obj: Note) -> str:
        url = reverse("conversation", args=[str(obj.conversation_id)]) + f"#m-{obj.message_seq}"
        return format_html('<a href="{}">Open in Replay</a>', url)

    def delete_model(self, request: HttpRequest, obj: Note) -> None:
        note_delete(note=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Note]) -> None:
        for note in queryset:
            note_delete(note=note)
