"""Search at scale (docs/api.md, Search): on PostgreSQL the words' tsvector is no longer stored beside
them; one GIN index holds the conversation and the words' lexemes (btree_gin), so a search
finds its conversations, or its hits in one conversation, without walking either. Indexes
that others already cover are dropped (a message's conversation, a block's message, the
LIKE index of call ids). The finder's marks (errors, unanswered calls) get a table of
their own, filled here from the blocks stored before.

The entries stored before keep their words: a tool result's middle stays findable in them
(docs/contract.md §3, what is indexed)."""

import django.db.models.deletion
from django.db import migrations, models

ENTRIES = "conversations_searchentry"
OLD_GIN = "conversations_searchentry_lexemes_gin"
GIN = "conversations_searchentry_words_gin"
LEXEMES = "array_to_tsvector(string_to_array(words, ' '))"

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    f"DROP INDEX IF EXISTS {OLD_GIN}",
    f"ALTER TABLE {ENTRIES} DROP COLUMN IF EXISTS lexemes",
    f"CREATE INDEX {GIN} ON {ENTRIES} USING gin (conversation_id, ({LEXEMES})) "
    # A pending list of at most 2 MB: ingest appends to it and merges it in bulk (a third
    # of the cost of updating the tree entry by entry); a search reads it whole (~2 ms).
    "WITH (fastupdate = on, gin_pending_list_limit = 2048)",
]
BACKWARD = [
    f"DROP INDEX IF EXISTS {GIN}",
    # IF NOT EXISTS: 0005's own `install` may have put them back (tests/record/test_migrations.py).
    f"ALTER TABLE {ENTRIES} ADD COLUMN IF NOT EXISTS lexemes tsvector "
    f"GENERATED ALWAYS AS ({LEXEMES}) STORED",
    f"CREATE INDEX IF NOT EXISTS {OLD_GIN} ON {ENTRIES} USING gin (lexemes) "
    "WITH (fastupdate = off)",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return  # SQLite's FTS5 table is unchanged
        for statement in statements:
            schema_editor.execute(statement)

    return run


# Portable SQL (SQLite and PostgreSQL): the marks of the blocks already stored.
MARK_ERRORS = """
    INSERT INTO conversations_findermark (conversation_id, message_seq, block_seq, kind, call_id)
    SELECT m.conversation_id, m.seq, b.seq, 'error', b.call_id
    FROM conversations_block b JOIN conversations_message m ON m.id = b.message_id
    WHERE b.is_error"""
MARK_UNANSWERED = """
    INSERT INTO conversations_findermark (conversation_id, message_seq, block_seq, kind, call_id)
    SELECT m.conversation_id, m.seq, b.seq, 'unanswered', b.call_id
    FROM conversations_block b JOIN conversations_message m ON m.id = b.message_id
    WHERE b.type = 'tool_use' AND NOT EXISTS (
        SELECT 1 FROM conversations_block r JOIN conversations_message rm ON rm.id = r.message_id
        WHERE r.call_id = b.call_id AND r.type = 'tool_result'
        AND rm.conversation_id = m.conversation_id)"""


class Migration(migrations.Migration):
    dependencies = [("conversations", "0014_stored_counts")]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD)),
        migrations.AlterField(
            model_name="block",
            name="call_id",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.AlterField(
            model_name="block",
            name="message",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="blocks",
                to="conversations.message",
            ),
        ),
        migrations.AlterField(
            model_name="message",
            name="conversation",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="messages",
                to="conversations.conversation",
            ),
        ),
        migrations.AddIndex(
            model_name="block",
            index=models.Index(fields=["call_id"], name="block_call_id"),
        ),
        migrations.CreateModel(
            name="FinderMark",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("message_seq", models.PositiveIntegerField()),
                ("block_seq", models.PositiveIntegerField()),
                (
                    "kind",
                    models.CharField(
                        choices=[("error", "Error"), ("unanswered", "Unanswered")], max_length=16
                    ),
                ),
                ("call_id", models.CharField(blank=True, default="", max_length=255)),
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
                "indexes": [
                    models.Index(
                        condition=models.Q(("kind", "unanswered")),
                        fields=["conversation", "call_id"],
                        name="finder_mark_open_call",
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("conversation", "message_seq", "block_seq"),
                        name="finder_mark_unique",
                    )
                ],
            },
        ),
        migrations.RunSQL([MARK_ERRORS, MARK_UNANSWERED], migrations.RunSQL.noop),
    ]
