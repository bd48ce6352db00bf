"""The finder's marks (`FinderMark`), stored in the same transaction as the blocks they
mark: an error result's, and an unanswered call's until its first result arrives."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import Exists, OuterRef

from conversations.core.blocks import kind_named, tool_side
from conversations.record.models import Block, Conversation, FinderMark, Message
from conversations.record.services.inserts import _insert_rows

ID_CHUNK = 5000  # call ids per statement (a 2,000-message batch is one of each)


def _mark_problems(
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
    for chunk in _chunks(sorted(answers)):
        FinderMark.objects.filter(
            conversation=conversation, kind=FinderMark.Kind.UNANSWERED, call_id__in=chunk
        ).delete()
    if calls:
        ids = sorted({call_id for _, _, _, call_id in calls} - answers)
        for chunk in _chunks(ids):
            # Through the call_id index, the conversation checked per block found (a
            # correlated EXISTS), so no planner walks a long conversation instead.
            mine = Message.objects.filter(pk=OuterRef("message_id"), conversation=conversation)
            answers.update(
                Block.objects.filter(
                    Exists(mine), type="tool_result", call_id__in=chunk
                ).values_list("call_id", flat=True)
            )
    marks = errors + [call for call in calls if call[3] not in answers]
    if marks:
        key = FinderMark._meta.get_field("conversation").get_db_prep_save(
            conversation.pk, connection
        )
        _insert_rows(
            FinderMark._meta.db_table,
            ("conversation_id", "message_seq", "block_seq", "kind", "call_id"),
            [(key, seq, block, str(kind), call_id) for seq, block, kind, call_id in marks],
            None,
        )


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[start : start + ID_CHUNK] for start in range(0, len(items), ID_CHUNK)]
