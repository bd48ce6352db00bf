"""Full-text matching on either database, for every search the record answers: the
search entries' index (`record.search.index`) and the notes' own (`record.notes.search`).

On SQLite a query is an FTS5 MATCH of quoted words (`fts5_query`); on PostgreSQL a
`tsquery` over the entry's lexemes, repeating the GIN index's expression (`LEXEMES`)
so the planner uses it. `Matches` puts either into a queryset's WHERE; `as_text` is the
substring fallback for text that is not indexed.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, F, Func
from django.db.models.expressions import Col
from django.db.models.sql.compiler import SQLCompiler

from conversations.core.search import Query

FTS = "conversations_searchentry_fts"


# The lexemes of an entry's words, verbatim (no parser, no configuration): the index's
# expression, which a condition must repeat exactly for the planner to use the index.
LEXEMES = "array_to_tsvector(string_to_array({words}, ' '))"


def fts5_query(query: Query) -> str:
    """An FTS5 MATCH expression: every word as a quoted string, so no query syntax
    (NEAR, `*`, `:`, `^`, quotes) ever reaches FTS5 from the user."""
    terms = [_quoted(word, '"') for word in query.words]
    terms += [_quoted(word, '"') + "*" for word in query.prefixes]
    return " AND ".join(terms)


def tsquery(query: Query) -> str:
    """A tsquery literal of quoted lexemes (taken verbatim: no parser, no config)."""
    terms = [_quoted(word.replace("\\", "\\\\"), "'") for word in query.words]
    terms += [_quoted(word.replace("\\", "\\\\"), "'") + ":*" for word in query.prefixes]
    return " & ".join(terms)


def _quoted(word: str, quote: str) -> str:
    return quote + word.replace(quote, quote * 2) + quote


class Matches(Func):
    """A condition on SearchEntry: its words hold every word of `query` (not empty).

    `indexed=False` (PostgreSQL) checks each entry it is given instead of asking the
    index: for a walk along another index that meets a match within a few entries."""

    output_field = BooleanField()
    conditional = True

    def __init__(self, query: Query, *, indexed: bool = True) -> None:
        if query.empty:
            raise ValueError("an empty query matches nothing; do not run it")
        self.query = query
        self.indexed = indexed
        super().__init__(F("id"), F("words"))

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[Any, ...]]:
        raise NotImplementedError("Replay's search supports SQLite and PostgreSQL only.")

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        id_sql, id_params = compiler.compile(self.source_expressions[0])
        return (
            f"{id_sql} IN (SELECT rowid FROM {FTS} WHERE {FTS} MATCH %s)",
            (*id_params, fts5_query(self.query)),
        )

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        words = self.source_expressions[1]
        if not isinstance(words, Col):
            raise TypeError(f"Matches needs the entry's own words, not {words!r}")
        column = f"{compiler.quote_name_unless_alias(words.alias)}.words"
        if self.indexed:
            return f"{LEXEMES.format(words=column)} @@ %s::tsquery", (tsquery(self.query),)
        # Checked entry by entry, as text (twenty times cheaper than making the entry's
        # lexemes again, and never the index's expression).
        return as_text(self.query, column)


def as_text(query: Query, column: str) -> tuple[str, tuple[str, ...]]:
    """PostgreSQL: a condition that the words in `column` hold every word of `query`,
    checked as text: the words are single-spaced, so a word is " w " in " words " and a
    prefix " p" in " words"."""
    terms = [(f"(' ' || {column} || ' ')", f"% {_like(w)} %") for w in query.words]
    terms += [(f"(' ' || {column})", f"% {_like(p)}%") for p in query.prefixes]
    sql = " AND ".join(f"{text} LIKE %s ESCAPE '\\'" for text, _ in terms)
    return f"({sql})", tuple(pattern for _, pattern in terms)


def _like(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
