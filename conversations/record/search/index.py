"""The full-text index over `SearchEntry.words`, one kind per database (docs/contract.md §3).

Words arrive made by `core.search`, so both databases look them up verbatim, as words or
word prefixes, and never scan stored text:

- SQLite: an FTS5 table whose content is the entry table itself (nothing stored twice),
  kept in step by triggers on that table, so any insert or delete of an entry (the
  conversation's cascade, a test's flush) updates it in the same transaction.
- PostgreSQL: one GIN index over (conversation, the words as lexemes): an expression
  index, so the lexemes are not stored a second time beside the words (docs/contract.md §3: they
  were a third of the database). Its lexeme keys answer a search over every conversation,
  and with the conversation key one conversation's hits, without reading its other
  entries. A plain word or prefix needs no recheck, so the words are read again only on
  a lossy bitmap page. Needs btree_gin (a trusted extension, migration 0011).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from conversations.record.fulltext import FTS, LEXEMES

ENTRIES = "conversations_searchentry"
GIN = "conversations_searchentry_words_gin"

SQLITE_INSTALL = [
    # 'ascii' splits only on ASCII punctuation and space: the words stay as core made
    # them; detail=none and no column sizes: a match needs nothing but the rowids.
    f"""CREATE VIRTUAL TABLE {FTS} USING fts5(
        words, content='{ENTRIES}', content_rowid='id',
        tokenize='ascii', detail='none', columnsize=0)""",
    f"""CREATE TRIGGER {FTS}_insert AFTER INSERT ON {ENTRIES} BEGIN
        INSERT INTO {FTS}(rowid, words) VALUES (new.id, new.words);
    END""",
    f"""CREATE TRIGGER {FTS}_delete AFTER DELETE ON {ENTRIES} BEGIN
        INSERT INTO {FTS}({FTS}, rowid, words) VALUES ('delete', old.id, old.words);
    END""",
    f"""CREATE TRIGGER {FTS}_update AFTER UPDATE ON {ENTRIES} BEGIN
        INSERT INTO {FTS}({FTS}, rowid, words) VALUES ('delete', old.id, old.words);
        INSERT INTO {FTS}(rowid, words) VALUES (new.id, new.words);
    END""",
    # Entries already stored (a re-install after the table was rebuilt).
    f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",
]
SQLITE_UNINSTALL = [
    f"DROP TRIGGER IF EXISTS {FTS}_insert",
    f"DROP TRIGGER IF EXISTS {FTS}_delete",
    f"DROP TRIGGER IF EXISTS {FTS}_update",
    f"DROP TABLE IF EXISTS {FTS}",
]
POSTGRES_INSTALL = [
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    # A pending list of at most 2 MB: ingest appends to it and merges it in bulk (a third
    # of the cost of updating the tree entry by entry); a search reads it whole (~2 ms).
    f"""CREATE INDEX {GIN} ON {ENTRIES}
        USING gin (conversation_id, ({LEXEMES.format(words="words")}))
        WITH (fastupdate = on, gin_pending_list_limit = 2048)""",
]
POSTGRES_UNINSTALL = [f"DROP INDEX IF EXISTS {GIN}"]


def _statements(connection: BaseDatabaseWrapper, *, install: bool) -> list[str]:
    match connection.vendor:
        case "sqlite":
            return SQLITE_INSTALL if install else SQLITE_UNINSTALL
        case "postgresql":
            return POSTGRES_INSTALL if install else POSTGRES_UNINSTALL
        case vendor:
            raise NotImplementedError(
                f"Replay's search supports SQLite and PostgreSQL, not {vendor}."
            )


def install(connection: BaseDatabaseWrapper) -> None:
    """Create the index (and on SQLite its triggers) over the entries already stored."""
    _run(connection, _statements(connection, install=True))


def uninstall(connection: BaseDatabaseWrapper) -> None:
    _run(connection, _statements(connection, install=False))


def _run(connection: BaseDatabaseWrapper, statements: Iterable[str]) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


# What `through_index` asks of PostgreSQL's planner: no plan that reads entries one by one
# (each would split its words again: tens of microseconds an entry), and room for the
# index's bitmap to stay exact (a lossy page has each of its entries split again). No JIT:
# compiling costs more than these short queries.
THROUGH_INDEX = {
    "enable_seqscan": "off",
    "enable_indexscan": "off",
    "work_mem": "64MB",
    "jit": "off",
}
# What `along_entries` asks: a walk in (message, block) order along the entries' btree,
# stopping at the first match, never a bitmap of a whole conversation's entries (the GIN
# index's conversation key would offer one).
ALONG_ENTRIES = {"enable_bitmapscan": "off", "jit": "off"}


@contextmanager
def through_index() -> Iterator[None]:
    """Inside, PostgreSQL answers a search's conditions from the GIN index (a bitmap of
    the entries holding the words), never by reading entries in another order and
    checking each. The planner's settings are restored on the way out; on SQLite, whose
    FTS5 table is always asked, nothing changes."""
    with _planner(THROUGH_INDEX):
        yield


@contextmanager
def along_entries() -> Iterator[None]:
    """Inside, PostgreSQL walks entries in order along the btree (`Matches(indexed=False)`
    checks each): for words common enough to be met within a few entries."""
    with _planner(ALONG_ENTRIES):
        yield


@contextmanager
def _planner(settings: dict[str, str]) -> Iterator[None]:
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic(), connection.cursor() as cursor:
        names = list(settings)
        # Read before set: a select list is evaluated from left to right.
        reads = ", ".join(f"current_setting('{name}')" for name in names)
        sets = ", ".join("set_config(%s, %s, true)" for _ in names)
        cursor.execute(f"SELECT {reads}, {sets}", [v for n in names for v in (n, settings[n])])
        before = cursor.fetchone()[: len(names)]
        yield
        # (On an error the rollback of the transaction or savepoint restores them.)
        restore = [v for n, b in zip(names, before, strict=True) for v in (n, b)]
        cursor.execute(f"SELECT {sets}", restore)
