"""The full-text index over `Note.words` (docs/contract.md §10: `q` finds note text).

Kept apart from the blocks' index (`record.search`), built the same way: SQLite an FTS5
table whose content is the note table, kept by triggers; PostgreSQL a stored tsvector
column with a GIN index. A query is `NoteMatches`, the blocks' `Matches` pointed at it.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.compiler import SQLCompiler

from conversations.record.search import Matches, fts5_query

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


class NoteMatches(Matches):
    """A condition on Note: its words hold every word of the query (PostgreSQL: the
    `lexemes` column of the note's own table, as `Matches` reads it)."""

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        id_sql, id_params = compiler.compile(self.source_expressions[0])
        return (
            f"{id_sql} IN (SELECT rowid FROM {FTS} WHERE {FTS} MATCH %s)",
            (*id_params, fts5_query(self.query)),
        )
