"""Stored token figures (docs/contract.md §7): each block's own count and each message's
count, running total and measured usage, then a backfill of the rows stored before them.

The backfill walks each conversation's messages in seq order, BATCH messages per
transaction with the conversation's row locked (as every append locks it): its running
totals continue from the batch before, and messages appended meanwhile by the new code are
recounted as the walk reaches them, so the totals hold when it ends. Blocks are streamed
per batch (memory bounded by a batch, not by what is stored); a block already counted
keeps its count. The counting rules are the code's own (`conversations.core`), so the
figures equal what the services write.
"""

from collections import OrderedDict
from typing import Any, cast

from django.db import migrations, models, transaction

from conversations.core import next_request as nr
from conversations.core import stored_counts, tokens
from conversations.record.rows import block_value

CONVERSATIONS = 200
BATCH = 200
TURNS = 1000  # response ids remembered while walking a conversation


def backfill(apps: Any, schema_editor: Any) -> None:
    conversation = apps.get_model("conversations", "Conversation")
    after = None
    while True:
        page = conversation.objects.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        ids = list(page.values_list("pk", flat=True)[:CONVERSATIONS])
        if not ids:
            return
        after = ids[-1]
        for pk in ids:
            _walk(apps, pk)


def _walk(apps: Any, pk: Any) -> None:
    conversation = apps.get_model("conversations", "Conversation")
    message = apps.get_model("conversations", "Message")
    block = apps.get_model("conversations", "Block")
    seq, before = 0, 0
    run: dict[str, int] = {}
    turns: OrderedDict[str, int] = OrderedDict()
    while True:
        with transaction.atomic():
            if not conversation.objects.select_for_update().filter(pk=pk).exists():
                return
            batch = list(
                message.objects.filter(conversation_id=pk, seq__gte=seq)
                .order_by("seq")
                .only("id", "seq", "role", "metadata")[:BATCH]
            )
            if not batch:
                return
            facts: dict[Any, list[stored_counts.StoredFacts]] = {m.pk: [] for m in batch}
            counted = []
            rows = (
                block.objects.filter(message_id__in=list(facts))
                .order_by("message_id", "seq")
                .iterator(chunk_size=BATCH)
            )
            for row in rows:
                value = block_value(row)
                own = row.tokens
                if own is None:
                    own = tokens.block_tokens(value, vision=True, shape="openai")
                    counted.append(block(pk=row.pk, tokens=own))
                facts[row.message_id].append(
                    stored_counts.StoredFacts(
                        row.type, own, tokens.blank(value), row.media_type, row.width, row.height
                    )
                )
            block.objects.bulk_update(counted, ["tokens"], batch_size=BATCH)
            for m in batch:
                before, run = _fill(m, facts[m.pk], before, run, turns)
            message.objects.bulk_update(
                batch,
                ["tokens", "cumulative", "counts", "varies", "heaviest", "measured",
                 "turn_start"],
                batch_size=BATCH,
            )  # fmt: skip
            seq = batch[-1].seq + 1


def _fill(
    m: Any,
    facts: list[stored_counts.StoredFacts],
    before: int,
    run: dict[str, int],
    turns: OrderedDict[str, int],
) -> tuple[int, dict[str, int]]:
    data = stored_counts.figures(m.role, facts)
    count = stored_counts.count(m.role, data, vision=True, shape="openai")
    data["run"] = stored_counts.add_kinds(run, count.by_kind)
    m.tokens = count.tokens
    m.cumulative = before + count.tokens
    m.counts = data
    m.varies = stored_counts.varies(m.role, data)
    m.heaviest = stored_counts.heaviest(m.role, facts)
    metadata = m.metadata if isinstance(m.metadata, dict) else {}
    turn = nr.turn_of(metadata)
    start = m.seq
    if turn is not None:
        start = turns.setdefault(turn, m.seq)
        turns.move_to_end(turn)
        while len(turns) > TURNS:
            turns.popitem(last=False)
    usage = tokens.usage_of(metadata)
    measured = m.role == "assistant" and usage is not None and bool(usage.input)
    m.measured = cast(Any, usage).input if measured else None
    m.turn_start = start if measured else None
    return m.cumulative, data["run"]


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("conversations", "0010_rejected_spans"),
    ]

    operations = [
        migrations.AddField(
            model_name="block",
            name="tokens",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="counts",
            field=models.JSONField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="cumulative",
            field=models.BigIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="heaviest",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="message",
            name="measured",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="tokens",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="turn_start",
            field=models.PositiveIntegerField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="varies",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("varies", True)),
                fields=["conversation", "seq"],
                name="message_varies",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("measured__isnull", False)),
                fields=["conversation", "seq"],
                name="message_measured",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(fields=["conversation", "-heaviest"], name="message_heaviest"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, atomic=False),
    ]
