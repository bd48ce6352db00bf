"""The notes' full-text index on PostgreSQL as search's became in 0015: one GIN index over
the expression `Matches` asks (the words' lexemes), not a stored tsvector column beside
the words, which `Matches` no longer reads. SQLite's FTS5 table is unchanged."""

from django.db import migrations

NOTES = "conversations_note"
OLD_GIN = "conversations_note_lexemes_gin"
GIN = "conversations_note_words_gin"
LEXEMES = "array_to_tsvector(string_to_array(words, ' '))"

FORWARD = [
    f"DROP INDEX IF EXISTS {OLD_GIN}",
    f"ALTER TABLE {NOTES} DROP COLUMN IF EXISTS lexemes",
    f"CREATE INDEX IF NOT EXISTS {GIN} ON {NOTES} USING gin (({LEXEMES})) WITH (fastupdate = off)",
]
BACKWARD = [
    f"DROP INDEX IF EXISTS {GIN}",
    f"ALTER TABLE {NOTES} ADD COLUMN IF NOT EXISTS lexemes tsvector "
    f"GENERATED ALWAYS AS ({LEXEMES}) STORED",
    f"CREATE INDEX IF NOT EXISTS {OLD_GIN} ON {NOTES} USING gin (lexemes) WITH (fastupdate = off)",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("conversations", "0015_search_scale")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD))]
