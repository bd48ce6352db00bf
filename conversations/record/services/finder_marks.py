"""The finder's marks (`FinderMark`), stored in the same transaction as the blocks they
mark: an error result's, and an unanswered call's until its first result arrives."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from conversations.core.blocks import kind_named, tool_side
from conversations.record.models.conversation import Block, BlockType, Conversation, Message
from conversations.record.models.search import FinderMark
from conversations.record.services.inserts import (
    ROWS_PER_STATEMENT,
    insert_rows,
    param_limit,
    quoted_column,
    stored_value,
    write_db,
)

ID_CHUNK = 5000  # call ids per statement (a 2,000-message batch is one of each)


def mark_problems(
    conversation: Conversation, stored: Sequence[tuple[Message, Sequence[Block]]]
) -> None:
    """Mark the new blocks' errors and unanswered calls; unmark the calls their results
    answer. A few indexed statements per append, none for blocks of neither kind."""
    errors: list[tuple[int, int, str, str]] = []
    calls: list[tuple[int, int, str, str]] = []
    answers: set[str] = set()
    for message, rows in stored:
        for row in rows:
            match tool_side(kind_named(row.type)):
                case "call":
                    calls.append((message.seq, row.seq, FinderMark.Kind.UNANSWERED, row.call_id))
                case "result":
                    answers.add(row.call_id)
                    if row.is_error:
                        errors.append((message.seq, row.seq, FinderMark.Kind.ERROR, row.call_id))
                case None:
                    pass
    key = stored_value(FinderMark, "conversation", conversation.pk)
    for chunk in _chunks(sorted(answers)):
        _unmark(key, chunk)
    if errors:
        insert_rows(
            FinderMark._meta.db_table,
            ("conversation_id", "message_seq", "block_seq", "kind", "call_id"),
            [(key, seq, block, str(kind), call_id) for seq, block, kind, call_id in errors],
            None,
        )
    unanswered = [
        (seq, block, call_id) for seq, block, _, call_id in calls if call_id not in answers
    ]
    limit = param_limit(write_db())
    per_statement = min(ROWS_PER_STATEMENT, (limit - 4) // 3 if limit else ROWS_PER_STATEMENT)
    for start in range(0, len(unanswered), per_statement):
        _mark_unanswered(key, unanswered[start : start + per_statement])


# The statements below run on every append of a call or a result: in SQL of their own, as
# building the ORM's queries cost several times what the database took to answer them.


def _unmark(key: Any, call_ids: list[str]) -> None:
    """Remove the conversation's (`key`: its id as stored) unanswered marks of these calls."""
    db = write_db()
    with db.cursor() as cursor:
        cursor.execute(
            _unmark_sql(db.vendor, len(call_ids)),
            [key, str(FinderMark.Kind.UNANSWERED), *call_ids],
        )


@functools.lru_cache(maxsize=64)
def _unmark_sql(vendor: str, ids: int) -> str:
    return (
        f"DELETE FROM {write_db().ops.quote_name(FinderMark._meta.db_table)} "
        f"WHERE {quoted_column(FinderMark, 'conversation')} = %s "
        f"AND {quoted_column(FinderMark, 'kind')} = %s "
        f"AND {quoted_column(FinderMark, 'call_id')} IN ({', '.join(['%s'] * ids)})"
    )


def _mark_unanswered(key: Any, calls: list[tuple[int, int, str]]) -> None:
    """Mark these calls (message seq, block seq, call id) unanswered, but for those that a
    result stored in the conversation answers already: asked in the same statement, through
    the call_id index, the conversation checked per block found (a correlated EXISTS), so no
    planner walks a long conversation instead."""
    db = write_db()
    with db.cursor() as cursor:
        cursor.execute(
            _mark_sql(db.vendor, len(calls)),
            [
                key,
                str(FinderMark.Kind.UNANSWERED),
                *(value for call in calls for value in call),
                str(BlockType.TOOL_RESULT),
                key,
            ],
        )


@functools.lru_cache(maxsize=64)
def _mark_sql(vendor: str, calls: int) -> str:
    quote = write_db().ops.quote_name
    blocks = quote(Block._meta.db_table)
    columns = ", ".join(
        quoted_column(FinderMark, name)
        for name in ("conversation", "message_seq", "block_seq", "kind", "call_id")
    )
    return (
        f"INSERT INTO {quote(FinderMark._meta.db_table)} ({columns}) "
        "SELECT %s, v.column1, v.column2, %s, v.column3 "
        f"FROM (VALUES {', '.join(['(%s, %s, %s)'] * calls)}) AS v "
        f"WHERE NOT EXISTS (SELECT 1 FROM {blocks} "
        f"WHERE {blocks}.{quoted_column(Block, 'type')} = %s "
        f"AND {blocks}.{quoted_column(Block, 'call_id')} = v.column3 "
        f"AND EXISTS (SELECT 1 FROM {quote(Message._meta.db_table)} U0 "
        f"WHERE U0.{quoted_column(Message, 'conversation')} = %s "
        f"AND U0.{quoted_column(Message, 'id')} = {blocks}.{quoted_column(Block, 'message')}))"
    )


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[start : start + ID_CHUNK] for start in range(0, len(items), ID_CHUNK)]
