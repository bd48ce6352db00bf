"""Backfills Conversation.error_count, .unanswered_calls and .model (0008) for the
conversations stored before them.

The backfill walks the conversations in batches of BATCH by primary key, each batch in a
transaction of its own (the migration is not atomic: PostgreSQL holds no lock on the
table for the whole walk, and ingest goes on between batches). A batch locks its
conversations' rows before it reads what they count, as every append locks its
conversation's row first: an append made meanwhile either committed before the lock, and
is counted, or waits for the batch to commit and adds its own to the counts written (an
absolute count written over an unlocked read would lose it). Each batch costs a fixed
number of queries over those conversations' rows alone (their error results, their last
messages' tool blocks) plus, per conversation, its last MODEL_MESSAGES messages whose
metadata holds a model key, newest first until one names a model. Memory and each query
stay bounded whatever is stored. Only conversations with something to record are updated,
and `updated_at` is left as it was (the list's order does not move).

The rules are those of `conversations.core.list_status`, written out here so that this
migration keeps meaning what it meant when the code moves on; one difference: a model
named only before a conversation's last MODEL_MESSAGES messages is not looked for.
"""

from typing import Any

from django.db import migrations, transaction
from django.db.models import Count, F, Q

BATCH = 500
MODEL_KEYS = ("model", "gen_ai.response.model", "gen_ai.request.model")
MODEL_CHARS = 200
MODEL_MESSAGES = 1000


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
        with transaction.atomic():
            # The batch's rows are locked before what they count is read (see above).
            page = conversation.objects.select_for_update().order_by("pk")
            if after is not None:
                page = page.filter(pk__gt=after)
            ids = list(page.values_list("pk", flat=True)[:BATCH])
            if not ids:
                return
            after = ids[-1]
            _batch(conversation, message, block, names_model, ids)


def _batch(conversation: Any, message: Any, block: Any, names_model: Q, ids: list[Any]) -> None:
    """One batch of conversations, whose rows are locked in the transaction its caller
    opened; reads their counts and writes them."""
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
            .filter(seq__gte=F("conversation__message_count") - MODEL_MESSAGES)
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
    atomic = False
    dependencies = [("conversations", "0008_list_filters_and_model")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, atomic=False)]
