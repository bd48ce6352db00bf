"""Full-text search (docs/contract.md §3): an entry of words per block and per title, the database's
own index over them (FTS5 on SQLite, GIN on PostgreSQL), and the words of what is stored."""

import re
import unicodedata
from functools import cache
from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models.functions import Substr

BATCH = 1000

# -- The words of a text, as `conversations.core.search` defined them when this migration
# was written (frozen here: a migration keeps its meaning when the code moves on). -------

INDEXED_CHARS = 100_000  # only the start of each block is indexed
MAX_WORD_CHARS = 100  # longer words are cut to this
_CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_ACCENTS = "\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_ACCENTED = "\u0000-\u052f\u1e00-\u1fff"  # Latin, Greek, Cyrillic (and their extensions)
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")


@cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The accents to strip and a word: built on first use, not whenever the migrations
    are loaded (scanning the combining marks costs a fifth of a second)."""
    ranges: list[str] = []
    start = previous = -2
    for code in [*range(0x20000), *range(0xE0100, 0xE01F0)]:
        if unicodedata.category(chr(code))[0] != "M":
            continue
        if code != previous + 1:
            if start >= 0:
                ranges.append(f"{chr(start)}-{chr(previous)}")
            start = code
        previous = code
    ranges.append(f"{chr(start)}-{chr(previous)}")
    marks = "".join(ranges)  # combining marks belong to the word they are in
    return (
        re.compile(f"(?<=[{_ACCENTED}])[{_ACCENTS}]+"),
        re.compile(f"[{_CJK}]|(?:[^\\W_{_CJK}]|[{marks}])+"),
    )


def fold(text: str) -> str:
    """NFKC, case-folded, accents on Latin, Greek and Cyrillic letters dropped."""
    if text.isascii():
        return text.lower()
    strip_accents, _ = _patterns()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return unicodedata.normalize("NFC", strip_accents.sub("", decomposed))


def index_words(text: str) -> str:
    """The distinct words of the first INDEXED_CHARS characters of `text`, in first-seen
    order, each cut to MAX_WORD_CHARS, joined by single spaces ("" when it has none)."""
    _, word = _patterns()
    found = (w[:MAX_WORD_CHARS] for w in word.findall(fold(text[:INDEXED_CHARS])))
    return " ".join(dict.fromkeys(found))


def searchable_text(kind: str, head: str, name: str, input_head: str) -> str:
    """The searchable text of a block read as its kind, name and the indexed starts of its
    text and input: its text, a tool's name and input (JSON escapes as spaces) or result;
    an image has none."""
    match kind:
        case "text" | "reasoning":
            return head
        case "tool_use":
            return f"{name} {_JSON_ESCAPE.sub(' ', input_head[:INDEXED_CHARS])}"
        case "tool_result":
            return f"{name} {head}"
        case _:
            return ""


# -- The index, as `conversations.record.search.index` installed it then. ----------------------

ENTRIES = "conversations_searchentry"
FTS = "conversations_searchentry_fts"
GIN = "conversations_searchentry_lexemes_gin"
INSTALL = {
    "sqlite": [
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
        f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",
    ],
    "postgresql": [
        f"""ALTER TABLE {ENTRIES} ADD COLUMN lexemes tsvector
            GENERATED ALWAYS AS (array_to_tsvector(string_to_array(words, ' '))) STORED""",
        f"CREATE INDEX {GIN} ON {ENTRIES} USING gin (lexemes) WITH (fastupdate = off)",
    ],
}
UNINSTALL = {
    "sqlite": [
        f"DROP TRIGGER IF EXISTS {FTS}_insert",
        f"DROP TRIGGER IF EXISTS {FTS}_delete",
        f"DROP TRIGGER IF EXISTS {FTS}_update",
        f"DROP TABLE IF EXISTS {FTS}",
    ],
    "postgresql": [
        f"DROP INDEX IF EXISTS {GIN}",
        f"ALTER TABLE {ENTRIES} DROP COLUMN IF EXISTS lexemes",
    ],
}


def _run(schema_editor: Any, statements: dict[str, list[str]]) -> None:
    vendor = schema_editor.connection.vendor
    if vendor not in statements:
        raise NotImplementedError(f"Replay's search supports SQLite and PostgreSQL, not {vendor}.")
    with schema_editor.connection.cursor() as cursor:
        for statement in statements[vendor]:
            cursor.execute(statement)


def index_stored(apps: Any, schema_editor: Any) -> None:
    """Install the index, then add an entry for every title and block already stored;
    only the indexed start of each block is read, however long the block."""
    _run(schema_editor, INSTALL)
    Conversation = apps.get_model("conversations", "Conversation")
    Block = apps.get_model("conversations", "Block")
    SearchEntry = apps.get_model("conversations", "SearchEntry")
    entries = [
        SearchEntry(conversation_id=pk, words=found)
        for pk, title in Conversation.objects.values_list("pk", "title").iterator(BATCH)
        if (found := index_words(title))
    ]
    SearchEntry.objects.bulk_create(entries, batch_size=BATCH)
    rows = (
        Block.objects.order_by("pk")
        .annotate(
            head=Substr("text", 1, INDEXED_CHARS),
            input_head=Substr("input_json", 1, INDEXED_CHARS),
        )
        .values_list(
            "message__conversation_id", "message__seq", "seq", "type", "head", "name", "input_head"
        )
    )
    entries = []
    for conversation_id, message_seq, seq, kind, head, name, input_head in rows.iterator(BATCH):
        if found := index_words(searchable_text(kind, head, name, input_head)):
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
    _run(schema_editor, UNINSTALL)


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
