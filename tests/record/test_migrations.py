"""Migrations keep their meaning when the code moves on (they import none of it), and the
data migrations write what the code would, even while ingest goes on."""

from __future__ import annotations

import ast
import importlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.search import SearchEntry
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.search import reads as search_reads
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from tests.builders import png, stored, text, tool_result, tool_use

MIGRATIONS = Path(__file__).resolve().parents[2] / "conversations" / "migrations"


def migration(name: str) -> Any:
    return importlib.import_module(f"conversations.migrations.{name}")


def state_apps(name: str) -> Any:
    """The models as they stand once migration `name` has run."""
    return MigrationLoader(connection).project_state(("conversations", name)).apps


# -- no migration imports the application's code ---------------------------------------


def app_imports(path: Path) -> list[str]:
    """The modules of this project, other than the migrations, that `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # `from . import x` stays in the migrations package; `from .. import x` leaves it.
            if node.level:
                names = [] if node.level == 1 else ["." * node.level + (node.module or "")]
            else:
                names = [node.module or ""]
        else:
            continue
        found += [
            name
            for name in names
            if name.startswith(".")
            or (
                name.split(".")[0] in {"conversations", "replaysite"}
                and not name.startswith("conversations.migrations")
            )
        ]
    return found


def test_no_migration_imports_the_application_code() -> None:
    files = sorted(MIGRATIONS.glob("[0-9]*.py"))
    assert files
    imports = {path.name: names for path in files if (names := app_imports(path))}
    assert imports == {}


# -- 0005 indexes what was stored as the services index it -----------------------------


@pytest.mark.django_db(transaction=True)
def test_the_search_migration_writes_the_entries_the_services_write() -> None:
    stored(
        "Émile's ΣΊΣΥΦΟΣ notebook",
        ("user", [text("Straße naïve 東京タワー ok"), png()], {}),
        (
            "assistant",
            [
                {"type": "reasoning", "text": "thinking about grep"},
                tool_use("c1", "grep", pattern="needle\nhaystack", flags=["-i", "\u00e9t\u00e9"]),
            ],
            {},
        ),
        ("user", [tool_result("c1", "found a needle", is_error=True)], {}),
        ("assistant", [text("word " * 30_000 + "beyond")], {}),
    )
    stored("— …")  # a title of no words has no entry
    columns = ("conversation_id", "message_seq", "block_seq", "words")
    written = set(SearchEntry.objects.values_list(*columns))
    assert len(written) == 6

    SearchEntry.objects.all().delete()
    search = migration("0005_search_entries")
    apps = state_apps("0005_search_entries")
    with connection.schema_editor() as editor:
        search.uninstall(apps, editor)
        search.index_stored(apps, editor)

    assert set(SearchEntry.objects.values_list(*columns)) == written
    # The index the migration installed answers the searches.
    for q in ("emile σίσυφος", "STRASSE naive", "京", "grep haystack", "found needle", "wor"):
        assert search_reads.conversation_list(q=q).count() == 1, q
    assert not search_reads.conversation_list(q="beyond").exists()  # past the indexed start


# -- 0009 backfills the list counters without losing a concurrent append ---------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="SQLite lets one writer at a time: an append cannot land inside a batch there",
)
def test_the_backfill_keeps_an_error_appended_while_its_batch_runs() -> None:
    """An append that lands after the backfill has read a batch's counts and before it writes
    them is not lost: it waits for the batch (or is read by it) and adds its own on top."""
    conversation = stored(
        "ingest goes on",
        ("assistant", [tool_use("a"), tool_use("b")], {"model": "m-1"}),
        ("user", [tool_result("a", "boom", is_error=True)], {}),
    )
    # As stored before 0008 added the counters.
    Conversation.objects.filter(pk=conversation.pk).update(
        error_count=0, unanswered_calls=0, model=""
    )
    backfill = migration("0009_backfill_list_filters")
    apps = state_apps("0009_backfill_list_filters")

    appended = threading.Event()
    backend: list[int] = []
    failures: list[BaseException] = []

    def append() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend.append(cursor.fetchone()[0])
            message_append(
                conversation=Conversation.objects.get(pk=conversation.pk),
                role="user",
                blocks=[BLOCK_ADAPTER.validate_python(tool_result("b", "bang", is_error=True))],
            )
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()
            appended.set()

    def waits_for_a_lock() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", backend
            )
            return bool(cursor.fetchone()[0])

    writer = threading.Thread(target=append)
    outcome: list[str] = []

    def interleave(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        # Just before the backfill writes a conversation's counters, which it has read: an
        # append from another connection, which must either commit or wait for this batch.
        if not outcome and sql.startswith('UPDATE "conversations_conversation"'):
            outcome.append("started")
            writer.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if appended.wait(0.02):
                    outcome.append("appended")
                    break
                if backend and waits_for_a_lock():
                    outcome.append("waited")
                    break
            else:
                pytest.fail("the concurrent append neither finished nor waited for a lock")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(interleave):
        backfill.backfill(apps, None)
    writer.join(10)
    assert not writer.is_alive()
    assert not failures, failures
    assert outcome[1:] in (["appended"], ["waited"])

    row = Conversation.objects.get(pk=conversation.pk)
    errors = Block.objects.filter(message__conversation=row, is_error=True).count()
    assert errors == 2
    assert (row.error_count, row.unanswered_calls, row.model) == (errors, 0, "m-1")


# -- 0011 counts what was stored as the services count it --------------------------------

FIGURES = ("tokens", "cumulative", "counts", "varies", "heaviest", "measured", "turn_start")


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_the_counts_migration_writes_the_figures_the_services_write() -> None:
    usage = {"id": "msg_a", "usage": {"input_tokens": 5, "cache_read_input_tokens": 900}}
    conversation = stored(
        "counted",
        ("system", [text("You are careful."), text("  ")], {}),
        ("user", [text("look"), png(), text(" \n "), text("this " * 9000 + "x" * 40_000)], {}),
        ("assistant", [{"type": "reasoning", "text": "hm"}, tool_use("c1", "grep", q="a")], usage),
        ("user", [tool_result("c1", "found")], {}),
        ("assistant", [text("done")], usage),
        ("user", [text("   ")], {}),
        ("user", [], {}),
    )
    written = {
        row[0]: row[1:]
        for row in Message.objects.filter(conversation=conversation).values_list("seq", *FIGURES)
    }
    blocks = dict(Block.objects.values_list("pk", "tokens"))
    assert written[4][-2:] == (905, 2)  # one response stored in two messages: one turn

    Message.objects.update(**dict.fromkeys(FIGURES[:3] + FIGURES[-2:]), varies=False, heaviest=0)
    Block.objects.update(tokens=None)
    counts = migration("0014_stored_counts")
    with connection.schema_editor() as editor:
        counts.backfill(state_apps("0014_stored_counts"), editor)

    again = {
        row[0]: row[1:]
        for row in Message.objects.filter(conversation=conversation).values_list("seq", *FIGURES)
    }
    assert again == written
    assert dict(Block.objects.values_list("pk", "tokens")) == blocks


@pytest.mark.sqlite
def test_the_finder_marks_of_blocks_stored_before_0011_are_what_services_write(
    db: None,
) -> None:
    from conversations.record.models.search import FinderMark

    conversation = conversation_create(title="marks")
    for role, blocks in [
        ("assistant", [text("go"), tool_use("a"), tool_use("b")]),
        ("user", [tool_result("a", "boom", is_error=True)]),
        ("assistant", [tool_use("c")]),
        ("user", [tool_result("c", "fine"), tool_result("z", "an answer to no call")]),
    ]:
        message_append(
            conversation=conversation,
            role=role,
            blocks=[BLOCK_ADAPTER.validate_python(b) for b in blocks],
        )
    other = conversation_create(title="another, with a call of the same id")
    message_append(
        conversation=other, role="assistant", blocks=[BLOCK_ADAPTER.validate_python(tool_use("c"))]
    )
    columns = ("conversation_id", "message_seq", "block_seq", "kind", "call_id")
    written = set(FinderMark.objects.values_list(*columns))
    assert {(m[1], m[2], m[3]) for m in written if m[0] == conversation.pk} == {
        (0, 2, "unanswered"),
        (1, 0, "error"),
    }
    FinderMark.objects.all().delete()
    scale = migration("0015_search_scale")
    with connection.cursor() as cursor:
        cursor.execute(scale.MARK_ERRORS)
        cursor.execute(scale.MARK_UNANSWERED)
    assert set(FinderMark.objects.values_list(*columns)) == written
