"""Appending messages and blocks, whole or not at all, through one path (`_append`): tool
names resolved, the conversation's list state kept, broadcast on commit."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, assert_never, cast

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from conversations.core import list_status, replay
from conversations.core.blocks import BlockKind, kind_named, tool_side
from conversations.record import events, metrics, signals
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Block, BlockType, Conversation, Message, Role
from conversations.record.schemas import (
    BlockIn,
    ImageIn,
    MessageIn,
    ReasoningIn,
    TextIn,
    ToolResultIn,
    ToolUseIn,
    image_size,
)
from conversations.record.services import token_figures
from conversations.record.services.conversations import lock_conversation
from conversations.record.services.finder_marks import mark_problems
from conversations.record.services.inserts import (
    bulk_insert,
    new_row,
    param_limit,
    quoted_column,
    stored_value,
    write_db,
)
from conversations.record.services.search_entries import entries_of, insert_search_entries

UNKNOWN_TOOL = "unknown"


def message_append(
    *,
    conversation: Conversation,
    role: str,
    blocks: Sequence[BlockIn],
    metadata: dict[str, Any] | None = None,
) -> tuple[Message, list[Block]]:
    """Append a message and its blocks, whole or not at all: `messages_append` of one.

    Broadcasts conversation.message_added on commit.
    """
    if role not in Role.values:
        raise IngestError("role", f"{role!r} is not one of {', '.join(Role.values)}")
    _check_images(role, blocks, "blocks")
    [(message, rows)] = _append(conversation, [(role, blocks, metadata or {})])
    return message, rows


def messages_append(
    *, conversation: Conversation, messages: Sequence[MessageIn]
) -> list[tuple[Message, list[Block]]]:
    """Append many messages with their blocks in one transaction, whole or not at all.

    Bulk inserts (statements bounded by the database's parameter limit, not one per row);
    tool_result names resolve across the batch as they would one message at a time.
    Broadcasts ONE conversation.message_added, for the last message, on commit.
    """
    if not messages:
        raise IngestError("messages", "must hold at least one message")
    for index, message in enumerate(messages):
        _check_images(message.role, message.blocks, f"messages[{index}].blocks")
    return _append(conversation, [(m.role, m.blocks, m.metadata) for m in messages])


def _append(
    conversation: Conversation,
    messages: Sequence[tuple[str, Sequence[BlockIn], dict[str, Any]]],
) -> list[tuple[Message, list[Block]]]:
    """The one append path: count the append into the conversation's row (which locks it,
    so `seq` stays dense under concurrent writers), insert messages then blocks in bulk,
    count their tokens, mark them for the finder, announce."""
    added_blocks = sum(len(blocks) for _, blocks, _ in messages)
    # The list row's state, known from the input: errors add up; the last message's open
    # calls replace the previous last message's; the latest model named is kept.
    failed = [
        sum(1 for b in blocks if isinstance(b, ToolResultIn) and b.is_error)
        for _, blocks, _ in messages
    ]
    errors = sum(failed)
    unanswered = len(list_status.open_calls(_call(block) for block in messages[-1][1]))
    model = list_status.latest_model(metadata for _, _, metadata in messages)
    with transaction.atomic():
        claimed = _claim(
            conversation,
            now=timezone.now(),
            messages=len(messages),
            blocks=added_blocks,
            errors=errors,
            unanswered=unanswered,
            model=model,
        )
        first = claimed.message_count - len(messages)
        names = _resolve_names(
            conversation,
            [block for _, blocks, _ in messages for block in blocks],
            up_to_message_seq=first - 1,
        )
        now = timezone.now()
        stored = [
            new_row(
                Message,
                "conversation",
                conversation,
                seq=first + index,
                role=role,
                block_count=len(blocks),
                metadata=metadata,
                created_at=now,
            )
            for index, (role, blocks, metadata) in enumerate(messages)
        ]
        rows: list[list[Block]] = []
        next_name = iter(names)
        for message, (_, blocks, _) in zip(stored, messages, strict=True):
            rows.append(
                [_row(message, seq, block, next(next_name)) for seq, block in enumerate(blocks)]
            )
        # Each block counted once, here: its texts counted beside this thread while the
        # database indexes the batch's words (the search entries need no ids).
        counting = token_figures.start_counting(rows)
        insert_search_entries(
            conversation,
            [
                entry
                for message, message_rows in zip(stored, rows, strict=True)
                for entry in entries_of(message, message_rows)
            ],
        )
        token_figures.count_new(conversation, stored, rows, counting)
        bulk_insert(Message, stored)
        for message, message_rows in zip(stored, rows, strict=True):
            for row in message_rows:
                row.message_id = message.pk
        bulk_insert(Block, [row for message_rows in rows for row in message_rows])
        mark_problems(conversation, list(zip(stored, rows, strict=True)))
        conversation.message_count = claimed.message_count
        conversation.block_count = claimed.block_count
        conversation.error_count = claimed.error_count
        conversation.unanswered_calls = unanswered
        conversation.model = claimed.model
        last = stored[-1]
        transaction.on_commit(lambda: metrics.ingested(messages=len(stored), blocks=added_blocks))
        events.publish_on_commit(
            {
                "type": "conversation.message_added",
                "conversation_id": str(conversation.id),
                "message_seq": last.seq,
                "block_count": last.block_count,
            }
        )
        first_error = next((first + i for i, count in enumerate(failed) if count), None)
        signals.appended.send(
            sender=Message,
            conversation_id=conversation.id,
            first_seq=first,
            errors=errors,
            error_seq=first_error,
        )
    return list(zip(stored, rows, strict=True))


def block_append(*, message: Message, block: BlockIn) -> Block:
    """Append one block at the end of a message; broadcasts conversation.block_added on commit."""
    _check_images(message.role, [block], "block")
    with transaction.atomic():
        locked = lock_conversation(message.conversation)
        # The conversation lock serialises appends, so this count is current.
        current = Message.objects.get(pk=message.pk)
        names = _resolve_names(locked, [block], up_to_message_seq=current.seq)
        row = _row(current, current.block_count, block, names[0])
        changes: dict[str, Any] = {"block_count": F("block_count") + 1}
        if row.is_error:
            changes["error_count"] = F("error_count") + 1
        if current.seq == locked.message_count - 1 and tool_side(kind_named(row.type)) is not None:
            # Only the last message's calls count; only this call's id can change.
            change = _open_change(current, row)
            if change:
                changes["unanswered_calls"] = F("unanswered_calls") + change
        token_figures.block_added(locked, current, row)
        row.save(force_insert=True)
        insert_search_entries(locked, entries_of(current, [row]))
        mark_problems(locked, [(current, [row])])
        Message.objects.filter(pk=current.pk).update(block_count=F("block_count") + 1)
        _touch(locked, **changes)
        message.block_count = current.block_count + 1
        transaction.on_commit(lambda: metrics.ingested(blocks=1))
        events.publish_on_commit(
            {
                "type": "conversation.block_added",
                "conversation_id": str(locked.id),
                "message_seq": current.seq,
                "block_seq": row.seq,
            }
        )
        signals.appended.send(
            sender=Message,
            conversation_id=locked.id,
            first_seq=current.seq,
            errors=int(row.is_error),
            error_seq=current.seq if row.is_error else None,
        )
    return row


class Claimed(NamedTuple):
    """The conversation's row as an append left it."""

    message_count: int
    block_count: int
    error_count: int
    model: str


def _claim(
    conversation: Conversation,
    *,
    now: datetime,
    messages: int,
    blocks: int,
    errors: int,
    unanswered: int,
    model: str,
) -> Claimed:
    """Count an append into the conversation's row, which stays locked until the commit
    (so `seq` stays dense under concurrent writers), and read what it now holds: the lock,
    the update and the read in one UPDATE … RETURNING (which the bulk inserts need too), in
    SQL of its own (the ORM's query building cost more than the statement did). `model`:
    kept when empty.

    Raises Conversation.DoesNotExist when the row is gone, as `lock_conversation` does."""
    db = write_db()
    params: list[Any] = [stored_value(Conversation, "updated_at", now)] * 2
    params += [messages, blocks, errors, unanswered, *([model] if model else [])]
    params.append(stored_value(Conversation, "id", conversation.pk))
    with db.cursor() as cursor:
        cursor.execute(_claim_sql(db.vendor, bool(model)), params)
        rows = cursor.fetchall()
    if not rows:
        raise Conversation.DoesNotExist("Conversation matching query does not exist.")
    return Claimed(*rows[0])


@functools.cache
def _claim_sql(vendor: str, model: bool) -> str:
    """`_claim`'s statement (setting the model or not), built once per database vendor."""

    def column(name: str) -> str:
        return quoted_column(Conversation, name)

    # `now` was taken before the lock, maybe before a writer that held it committed: the
    # later of the two, so that the row's time never goes back.
    updated = column("updated_at")
    sets = [f"{updated} = CASE WHEN {updated} > %s THEN {updated} ELSE %s END"]
    sets += [
        f"{column(name)} = {column(name)} + %s"
        for name in ("message_count", "block_count", "error_count")
    ]
    sets.append(f"{column('unanswered_calls')} = %s")
    if model:
        sets.append(f"{column('model')} = %s")
    return (
        f"UPDATE {write_db().ops.quote_name(Conversation._meta.db_table)} "
        f"SET {', '.join(sets)} WHERE {column('id')} = %s "
        f"RETURNING {', '.join(column(name) for name in Claimed._fields)}"
    )


def _call(block: BlockIn) -> tuple[BlockKind, str]:
    """A block's kind and call id, as its row will hold them (`_row`)."""
    match block:
        case ToolUseIn(id=call_id):
            return "tool_use", call_id
        case ToolResultIn(tool_use_id=call_id):
            return "tool_result", call_id
        case TextIn() | ReasoningIn() | ImageIn():
            return kind_named(block.type), ""
        case _:
            assert_never(block)


def _kind(row: Block) -> BlockKind:
    return cast(BlockKind, row.type)


def _open_change(message: Message, row: Block) -> int:
    """How a new block `row` (not yet saved) changes the number of `message`'s open calls:
    +1, -1 or 0. Reads only the message's blocks with the same call id (an indexed column)."""
    earlier = (
        Block.objects.filter(message=message, call_id=row.call_id)
        .order_by("seq")
        .values_list("type", flat=True)
    )
    before = list_status.open_calls((cast(BlockKind, kind), row.call_id) for kind in earlier)
    after = list_status.open_calls([(_kind(row), row.call_id)], already=before)
    return int(row.call_id in after) - int(row.call_id in before)


def _touch(conversation: Conversation, **changes: Any) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now(), **changes)


def _check_images(role: str, blocks: Iterable[BlockIn], field: str) -> None:
    """Images only in user messages; `field` is the blocks' list (`…blocks`) or `block`."""
    if role == Role.USER:
        return
    for index, block in enumerate(blocks):
        if isinstance(block, ImageIn):
            where = field if field == "block" else f"{field}[{index}]"
            raise IngestError(where, f"images may only be in user messages, not {role}")


def _resolve_names(
    conversation: Conversation, blocks: Sequence[BlockIn], *, up_to_message_seq: int
) -> list[str]:
    """The stored name of each block's tool: a result without one takes the name of the
    latest earlier tool_use with its id in the conversation, else `unknown`."""
    wanted: set[str] = set()
    called: set[str] = set()  # ids a tool_use earlier in `blocks` already names
    for block in blocks:
        if isinstance(block, ToolUseIn):
            called.add(block.id)
        elif (
            isinstance(block, ToolResultIn)
            and block.name is None
            and block.tool_use_id not in called
        ):
            wanted.add(block.tool_use_id)
    known: dict[str, str] = {}
    ordered = sorted(wanted)
    # One query unless the ids outgrow the database's parameter limit (SQLite's real one).
    limit = param_limit(connection)
    chunk = max(1, limit - 10) if limit else max(1, len(ordered))
    for start in range(0, len(ordered), chunk):
        earlier = (
            Block.objects.filter(
                message__conversation=conversation,
                message__seq__lte=up_to_message_seq,
                type=BlockType.TOOL_USE,
                call_id__in=ordered[start : start + chunk],
            )
            .order_by("message__seq", "seq")
            .values_list("call_id", "name")
        )
        known.update(earlier)  # later rows overwrite earlier ones: the latest wins
    names: list[str] = []
    for block in blocks:
        if isinstance(block, ToolUseIn):
            known[block.id] = block.name
            names.append(block.name)
        elif isinstance(block, ToolResultIn):
            names.append(block.name or known.get(block.tool_use_id, UNKNOWN_TOOL))
        else:
            names.append("")
    return names


def _row(message: Message, seq: int, block: BlockIn, name: str) -> Block:
    columns: dict[str, Any] = {"seq": seq, "type": block.type, "name": name, "origin": block.origin}
    match block:
        case TextIn(text=text) | ReasoningIn(text=text):
            columns["text"] = text
        case ToolUseIn(id=call_id, input=value):
            columns["call_id"] = call_id
            columns["input_json"] = replay.tool_input_json(value)
        case ToolResultIn(tool_use_id=call_id, content=content, is_error=is_error):
            columns.update(call_id=call_id, text=content, is_error=is_error)
        case ImageIn(media_type=media_type, data=data):
            width, height = image_size(data, media_type)
            columns.update(media_type=media_type, data=data, width=width, height=height)
        case _:
            assert_never(block)
    return new_row(Block, "message", message, **columns)
