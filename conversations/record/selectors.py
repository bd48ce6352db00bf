"""Reads that shape the record for its consumers, in a fixed number of queries.

`stored_messages` is the only bridge from the database to the pure projection;
`record_data` is the API's view of the same rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple, assert_never, cast

import orjson
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum

from conversations.core import replay
from conversations.core.blocks import BlockKind, kind_of
from conversations.record.models import Block, Conversation, Message

BLOCK_COLUMNS = (
    "message_id", "seq", "type", "text", "call_id", "name", "input_json", "is_error",
    "media_type", "data", "origin",
)  # fmt: skip


class BlockRow(NamedTuple):
    message_id: int
    seq: int
    type: str
    text: str
    call_id: str
    name: str
    input_json: str
    is_error: bool
    media_type: str
    data: str
    origin: Any


class MessageRow(NamedTuple):
    id: int
    seq: int
    role: str
    created_at: datetime
    metadata: dict[str, Any]
    blocks: list[BlockRow]


def conversation_get(conversation_id: str | uuid.UUID) -> Conversation | None:
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    return Conversation.objects.filter(pk=pk).first()


def conversation_list(*, q: str = "") -> QuerySet[Conversation]:
    """Conversations, newest activity first; `q` matches titles and block text."""
    conversations = Conversation.objects.order_by("-updated_at", "-created_at", "id")
    q = q.strip()
    if q:
        in_blocks = Block.objects.filter(message__conversation=OuterRef("pk"), text__icontains=q)
        conversations = conversations.filter(Q(title__icontains=q) | Exists(in_blocks))
    return conversations


def message_get(conversation: Conversation, seq: int) -> Message | None:
    return Message.objects.filter(conversation=conversation, seq=seq).first()


def message_rows(
    conversation: Conversation, *, start: int = 0, stop: int | None = None
) -> list[MessageRow]:
    """Messages with seq in [start, stop) (all by default) with their blocks: two queries,
    one snapshot.

    Whatever commits between the two queries is left out: a message past the last one read,
    and a block past its message's count as read (blocks are only ever appended, with the
    count in the same transaction), so each message carries exactly `block_count` blocks.
    """
    messages = Message.objects.filter(conversation=conversation, seq__gte=start)
    if stop is not None:
        messages = messages.filter(seq__lt=stop)
    rows: dict[int, MessageRow] = {}
    counts: dict[int, int] = {}
    for pk, seq, role, created_at, metadata, block_count in messages.order_by("seq").values_list(
        "id", "seq", "role", "created_at", "metadata", "block_count"
    ):
        rows[pk] = MessageRow(pk, seq, role, created_at, metadata, [])
        counts[pk] = block_count
    if not rows:
        return []
    last = next(reversed(rows.values())).seq
    blocks = Block.objects.filter(
        message__conversation=conversation, message__seq__gte=start, message__seq__lte=last
    )
    for values in blocks.order_by("message_id", "seq").values_list(*BLOCK_COLUMNS):
        block = BlockRow._make(values)
        if block.seq < counts.get(block.message_id, 0):
            rows[block.message_id].blocks.append(block)
    return list(rows.values())


def stored_messages(rows: Iterable[MessageRow]) -> list[replay.StoredMessage]:
    """The projection's input for these rows."""
    return [
        replay.StoredMessage(cast(replay.Role, row.role), tuple(map(block_value, row.blocks)))
        for row in rows
    ]


def block_value(row: BlockRow | Block) -> replay.Block:
    """A stored row as its value; the row's columns are read as its kind defines them."""
    kind = cast(BlockKind, row.type)
    match kind:
        case "text":
            return replay.TextBlock(row.text)
        case "tool_use":
            return replay.ToolUseBlock(row.call_id, row.name, row.input_json)
        case "tool_result":
            return replay.ToolResultBlock(row.call_id, row.name, row.text, row.is_error)
        case "reasoning":
            return replay.ReasoningBlock(row.text)
        case "image":
            return replay.ImageBlock(row.media_type, row.data)
        case _:
            assert_never(kind)


def block_data(row: BlockRow | Block) -> dict[str, Any]:
    """A block as the API shows it: its seq, its type and the fields it was stored with
    (its `origin` only when it has one)."""
    data = _block_fields(row)
    if row.origin is not None:
        data["origin"] = row.origin
    return data


def _block_fields(row: BlockRow | Block) -> dict[str, Any]:
    value = block_value(row)
    head: dict[str, Any] = {"seq": row.seq, "type": kind_of(value)}
    match value:
        case replay.TextBlock() | replay.ReasoningBlock():
            return head | {"text": value.text}
        case replay.ToolUseBlock():
            return head | {
                "id": value.id,
                "name": value.name,
                "input": orjson.Fragment(value.input_json),
            }
        case replay.ToolResultBlock():
            return head | {
                "tool_use_id": value.tool_use_id,
                "name": value.name,
                "content": value.content,
                "is_error": value.is_error,
            }
        case replay.ImageBlock():
            return head | {"media_type": value.media_type, "data": value.data}
        case _:
            assert_never(value)


def conversation_data(conversation: Conversation, *, url: str) -> dict[str, Any]:
    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "metadata": conversation.metadata,
        "message_count": conversation.message_count,
        "created_at": conversation.created_at,
        "updated_at": conversation.updated_at,
        "url": url,
    }


def message_data(row: MessageRow | Message, blocks: Iterable[BlockRow | Block]) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "role": row.role,
        "metadata": row.metadata,
        "created_at": row.created_at,
        "blocks": [block_data(block) for block in blocks],
    }


def record_data(conversation: Conversation, *, url: str) -> dict[str, Any]:
    """The whole record, unpaginated and deterministic; its messages are those its
    `message_count` counts, however many were appended since `conversation` was read."""
    data = conversation_data(conversation, url=url)
    rows = message_rows(conversation, stop=conversation.message_count)
    data["messages"] = [message_data(row, row.blocks) for row in rows]
    return data


def replay_payload(
    conversation: Conversation, *, vision: bool, shape: replay.Shape
) -> replay.Payload:
    """The projection of the whole conversation: what every consumer serves."""
    return replay.project(stored_messages(message_rows(conversation)), vision=vision, shape=shape)


def replay_json(conversation: Conversation, *, vision: bool, shape: replay.Shape) -> bytes:
    """The projection as bytes: the API's replay and the page's download serve exactly these."""
    return orjson.dumps(replay_payload(conversation, vision=vision, shape=shape))


def block_total(conversation: Conversation) -> int:
    total = Message.objects.filter(conversation=conversation).aggregate(n=Sum("block_count"))
    return int(total["n"] or 0)


def deletion_totals(conversation_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """Conversation id → (messages, blocks) it holds: what deleting it takes along."""
    rows = (
        Message.objects.filter(conversation_id__in=conversation_ids)
        .values("conversation_id")
        .annotate(message_total=Count("id"), block_total=Sum("block_count"))
        .order_by()
        .values_list("conversation_id", "message_total", "block_total")
    )
    return {pk: (messages, blocks or 0) for pk, messages, blocks in rows}


def block_counts(conversation: Conversation | uuid.UUID, *, start: int = 0) -> dict[int, int]:
    """Message seq → block count, from `start` on: a client's position, server side
    (for a conversation or its id; an unknown id has none)."""
    rows = Message.objects.filter(conversation=conversation, seq__gte=start).order_by("seq")
    return dict(rows.values_list("seq", "block_count"))


def image_block(conversation: Conversation, seq: int, block: int) -> tuple[str, str] | None:
    """(media type, base64 data) of an image block, or None if that block is no image."""
    return (
        Block.objects.filter(
            message__conversation=conversation, message__seq=seq, seq=block, type="image"
        )
        .values_list("media_type", "data")
        .first()
    )


def unanswered_tool_calls(conversations: Iterable[Conversation]) -> set[uuid.UUID]:
    """The conversations whose last message holds a tool_use with no later result for it."""
    last = dict(
        Message.objects.filter(
            conversation__in=list(conversations), seq=F("conversation__message_count") - 1
        ).values_list("id", "conversation_id")
    )
    pending: dict[uuid.UUID, set[str]] = {}
    tool_blocks = (
        Block.objects.filter(message_id__in=last, type__in=["tool_use", "tool_result"])
        .order_by("message_id", "seq")
        .values_list("message_id", "type", "call_id")
    )
    for message_id, kind, call_id in tool_blocks:
        open_calls = pending.setdefault(last[message_id], set())
        if kind == "tool_use":
            open_calls.add(call_id)
        else:
            open_calls.discard(call_id)
    return {conversation_id for conversation_id, calls in pending.items() if calls}
