"""Full-text search (docs/contract.md §3): an entry of words per block and per title, the database's
own index over them (FTS5 on SQLite, GIN on PostgreSQL), and the words of what is stored."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models.functions import Substr

from conversations.core import search as words
from conversations.record import search, selectors

BATCH = 1000


def index_stored(apps: Any, schema_editor: Any) -> None:
    """Install the index, then add an entry for every title and block already stored;
    only the indexed start of each block is read, however long the block."""
    search.install(schema_editor.connection)
    Conversation = apps.get_model("conversations", "Conversation")
    Block = apps.get_model("conversations", "Block")
    SearchEntry = apps.get_model("conversations", "SearchEntry")
    entries = [
        SearchEntry(conversation_id=pk, words=found)
        for pk, title in Conversation.objects.values_list("pk", "title").iterator(BATCH)
        if (found := words.index_words(title))
    ]
    SearchEntry.objects.bulk_create(entries, batch_size=BATCH)
    rows = (
        Block.objects.order_by("pk")
        .annotate(
            head=Substr("text", 1, words.INDEXED_CHARS),
            input_head=Substr("input_json", 1, words.INDEXED_CHARS),
        )
        .values_list(
            "message__conversation_id", "message__seq", "seq", "type", "head", "name", "input_head"
        )
    )
    entries = []
    for conversation_id, message_seq, seq, kind, head, name, input_head in rows.iterator(BATCH):
        text = selectors.searchable_text(kind, head, name, input_head)
        if found := words.index_words(text):
            entries.append(
                SearchEntry(
                    conversation_id=conversation_id,
                    message_seq=message_seq,
                    block_seq=seq,
                    words=found,
                )
            )
        if len(entries) >= BATCH:
            SearchEntry.objects.bulk_create(entries)
            entries = []
    SearchEntry.objects.bulk_create(entries)


def uninstall(apps: Any, schema_editor: Any) -> None:
    search.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0004_livein_tail_cursor_trace_conversation"),
    ]

    operations = [
        migrations.CreateModel(
            name="SearchEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("message_seq", models.PositiveIntegerField(null=True)),
                ("block_seq", models.PositiveIntegerField(null=True)),
                ("words", models.TextField()),
                (
                    "conversation",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="conversations.conversation",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "search entries",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("conversation", "message_seq", "block_seq"),
                        name="search_entry_unique",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("message_seq__isnull", True)),
                        fields=("conversation",),
                        name="search_entry_one_title",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("block_seq__isnull", True), ("message_seq__isnull", True)),
                            models.Q(("block_seq__isnull", False), ("message_seq__isnull", False)),
                            _connector="OR",
                        ),
                        name="search_entry_block_or_title",
                    ),
                ],
            },
        ),
        migrations.RunPython(index_stored, uninstall),
    ]
