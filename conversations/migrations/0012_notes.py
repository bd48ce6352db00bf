"""Notes (docs/contract.md §10): notes on messages, their labels, their full-text index, and
share links that show them."""

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# -- The index, as `conversations.record.notes.search` installed it then. -----------------

NOTES = "conversations_note"
FTS = "conversations_note_fts"
GIN = "conversations_note_lexemes_gin"

SQLITE_INSTALL = [
    f"""CREATE VIRTUAL TABLE {FTS} USING fts5(
        words, content='{NOTES}', content_rowid='id',
        tokenize='ascii', detail='none', columnsize=0)""",
    f"""CREATE TRIGGER {FTS}_insert AFTER INSERT ON {NOTES} BEGIN
        INSERT INTO {FTS}(rowid, words) VALUES (new.id, new.words);
    END""",
    f"""CREATE TRIGGER {FTS}_delete AFTER DELETE ON {NOTES} BEGIN
        INSERT INTO {FTS}({FTS}, rowid, words) VALUES ('delete', old.id, old.words);
    END""",
    f"""CREATE TRIGGER {FTS}_update AFTER UPDATE ON {NOTES} BEGIN
        INSERT INTO {FTS}({FTS}, rowid, words) VALUES ('delete', old.id, old.words);
        INSERT INTO {FTS}(rowid, words) VALUES (new.id, new.words);
    END""",
    f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",
]
SQLITE_UNINSTALL = [
    f"DROP TRIGGER IF EXISTS {FTS}_insert",
    f"DROP TRIGGER IF EXISTS {FTS}_delete",
    f"DROP TRIGGER IF EXISTS {FTS}_update",
    f"DROP TABLE IF EXISTS {FTS}",
]
POSTGRES_INSTALL = [
    f"""ALTER TABLE {NOTES} ADD COLUMN lexemes tsvector
        GENERATED ALWAYS AS (array_to_tsvector(string_to_array(words, ' '))) STORED""",
    f"CREATE INDEX {GIN} ON {NOTES} USING gin (lexemes) WITH (fastupdate = off)",
]
POSTGRES_UNINSTALL = [
    f"DROP INDEX IF EXISTS {GIN}",
    f"ALTER TABLE {NOTES} DROP COLUMN IF EXISTS lexemes",
]


def _run(schema_editor: Any, statements: dict[str, list[str]]) -> None:
    vendor = schema_editor.connection.vendor
    if vendor not in statements:
        raise NotImplementedError(f"Replay's search supports SQLite and PostgreSQL, not {vendor}.")
    with schema_editor.connection.cursor() as cursor:
        for statement in statements[vendor]:
            cursor.execute(statement)


def install(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, {"sqlite": SQLITE_INSTALL, "postgresql": POSTGRES_INSTALL})


def uninstall(apps: Any, schema_editor: Any) -> None:
    _run(schema_editor, {"sqlite": SQLITE_UNINSTALL, "postgresql": POSTGRES_UNINSTALL})


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0011_token_expiry"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="sharelink",
            name="notes",
            field=models.BooleanField(default=False),
        ),
        migrations.CreateModel(
            name="Note",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("message_seq", models.PositiveIntegerField()),
                ("block_seq", models.PositiveIntegerField(blank=True, null=True)),
                ("text", models.TextField()),
                ("labels", models.JSONField(blank=True, default=list)),
                ("author", models.CharField(max_length=200)),
                ("token_label", models.CharField(blank=True, default="", max_length=200)),
                ("words", models.TextField(blank=True, default="", editable=False)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="conversations.conversation",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["conversation_id", "message_seq", "id"],
                "indexes": [
                    models.Index(
                        fields=["conversation", "message_seq", "id"], name="note_by_message"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="NoteLabel",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=40)),
                (
                    "conversation",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="conversations.conversation",
                    ),
                ),
                (
                    "note",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="label_rows",
                        to="conversations.note",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["name", "conversation"], name="note_label_by_name"),
                    models.Index(
                        fields=["conversation", "name"], name="note_label_by_conversation"
                    ),
                ],
            },
        ),
        migrations.RunPython(install, uninstall, elidable=False),
    ]
