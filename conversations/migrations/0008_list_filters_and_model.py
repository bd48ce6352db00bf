"""The list's filters and model column: Conversation.error_count, .unanswered_calls and
.model, kept by the services from now on, with a partial index per filter in the list's
order; the conversations stored before are backfilled here.

The backfill walks the conversations in batches of BATCH by primary key: each batch costs
a fixed number of queries over those conversations' rows alone (their error results,
their last messages' tool blocks) plus, per conversation, the latest messages whose
metadata holds a model key, read newest first until one names a model. Memory and each
query stay bounded whatever is stored. Only conversations with something to record are
updated, and `updated_at` is left as it was (the list's order does not move).

The rules are those of `conversations.core.status`, written out here so that this
migration keeps meaning what it meant when the code moves on.
"""

from typing import Any

from django.db import migrations, models
from django.db.models import Count, F, Q

BATCH = 500
MODEL_KEYS = ("model", "gen_ai.response.model", "gen_ai.request.model")
MODEL_CHARS = 200


def model_of(metadata: object) -> str:
    if not isinstance(metadata, dict):
        return ""
    for key in MODEL_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:MODEL_CHARS]
    return ""


def backfill(apps: Any, schema_editor: Any) -> None:
    conversation = apps.get_model("conversations", "Conversation")
    message = apps.get_model("conversations", "Message")
    block = apps.get_model("conversations", "Block")
    names_model = Q()
    for key in MODEL_KEYS:
        names_model |= Q(metadata__has_key=key)
    after = None
    while True:
        page = conversation.objects.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        ids = list(page.values_list("pk", flat=True)[:BATCH])
        if not ids:
            return
        after = ids[-1]
        errors = dict(
            block.objects.filter(message__conversation_id__in=ids, is_error=True)
            .values("message__conversation_id")
            .annotate(n=Count("id"))
            .order_by()
            .values_list("message__conversation_id", "n")
        )
        last = dict(
            message.objects.filter(
                conversation_id__in=ids, seq=F("conversation__message_count") - 1
            ).values_list("id", "conversation_id")
        )
        open_calls: dict[Any, set[str]] = {}
        tool_blocks = (
            block.objects.filter(message_id__in=list(last), type__in=["tool_use", "tool_result"])
            .order_by("message_id", "seq")
            .values_list("message_id", "type", "call_id")
        )
        for message_id, kind, call_id in tool_blocks:
            calls = open_calls.setdefault(last[message_id], set())
            if kind == "tool_use":
                calls.add(call_id)
            else:
                calls.discard(call_id)
        for pk in ids:
            model = ""
            candidates = (
                message.objects.filter(names_model, conversation_id=pk)
                .order_by("-seq")
                .values_list("metadata", flat=True)
            )
            for metadata in candidates.iterator(chunk_size=20):
                if model := model_of(metadata):
                    break
            unanswered = len(open_calls.get(pk, ()))
            if errors.get(pk) or unanswered or model:
                conversation.objects.filter(pk=pk).update(
                    error_count=errors.get(pk, 0), unanswered_calls=unanswered, model=model
                )


class Migration(migrations.Migration):
    dependencies = [("conversations", "0007_share_share_links")]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="error_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="conversation",
            name="model",
            field=models.CharField(blank=True, default="", editable=False, max_length=200),
        ),
        migrations.AddField(
            model_name="conversation",
            name="unanswered_calls",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("error_count__gt", 0)),
                fields=["-updated_at", "-created_at", "id"],
                name="conversation_has_errors",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("unanswered_calls__gt", 0)),
                fields=["-updated_at", "-created_at", "id"],
                name="conversation_unanswered",
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
