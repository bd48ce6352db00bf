"""The full-text index over `Note.words` (docs/contract.md §10: `q` finds note text).

Kept apart from the blocks' index (`record.search.index`), built the same way: SQLite an FTS5
table whose content is the note table, kept by triggers; PostgreSQL a GIN index over the
words' lexemes. A query is `NoteMatches`, the blocks' `Matches` pointed at it.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.compiler import SQLCompiler

from conversations.record.fulltext import Matches, fts5_query

FTS = "conversations_note_fts"  # SQLite's FTS5 table over the notes' words (0012_notes)
# PostgreSQL: a GIN index over the expression `Matches` asks (0016_note_words_index).


class NoteMatches(Matches):
    """A condition on Note: its words hold every word of the query (PostgreSQL: as
    `Matches` asks it, through the notes' own expression index)."""

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        id_sql, id_params = compiler.compile(self.source_expressions[0])
        return (
            f"{id_sql} IN (SELECT rowid FROM {FTS} WHERE {FTS} MATCH %s)",
            (*id_params, fts5_query(self.query)),
        )
