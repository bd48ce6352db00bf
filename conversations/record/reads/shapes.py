"""The API's JSON shapes of the record: a block, a message, a conversation, the whole record
and a share link, as `GET /api/...` answers them (docs/contract.md §3)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, assert_never

import orjson

from conversations.core import replay
from conversations.core.blocks import kind_of
from conversations.core.notes import NoteValue
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads.rows import BlockRow, MessageRow, block_value
from conversations.record.reads.selectors import message_rows


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


def note_data(note: NoteValue) -> dict[str, Any]:
    """A note as the API gives it (docs/contract.md §10)."""
    return {
        "id": note.id,
        "seq": note.seq,
        "block": note.block,
        "text": note.text,
        "labels": list(note.labels),
        "author": note.author,
        "created_at": note.created_at,
        "updated_at": note.updated_at,
    }
